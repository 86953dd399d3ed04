import { defineConfig } from 'vitest/config';

/** The browser suite (npm run test:ui, one of npm test's suites): headless Chromium against the built UI. */
export default defineConfig({
  test: {
    include: ['test/ui/**/*.spec.ts'],
    globalSetup: ['test/helpers/global-setup.ts', 'test/ui/browser-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 1,
  },
});
