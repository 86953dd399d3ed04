import { defineConfig } from 'vitest/config';

/**
 * Test files share their worker process, and the modules it has loaded, from file to file: the suite took
 * 402 s with a process per file and 305 s this way on 2 cores. A file restores the process-wide state it
 * changes (fake timers, spies) and closes what it opens, connection pools included. The files that replace
 * a module with vi.mock need modules of their own, so they run isolated.
 */
const mocksModules = ['test/training/worker-claim-wait.test.ts', 'test/inference/fast-validation.test.ts'];

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Each file gets its own database; two workers suit the 2-core machines this runs on.
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'shared', include: ['test/**/*.test.ts'], exclude: mocksModules, isolate: false } },
      { extends: true, test: { name: 'isolated', include: mocksModules, isolate: true } },
    ],
  },
});
