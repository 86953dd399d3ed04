import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { onPostgresServer } from '../helpers/database.js';

/**
 * The build check and the package scripts that run it (prepare, start), in a scratch project that has this
 * checkout's scripts and package scripts, and a build of its own: one that writes the outputs the check
 * looks for, a server that says it ran, and a line in build.log per build (or exits 3 when told to fail).
 */
const root = path.resolve(import.meta.dirname, '../..');
const projects: string[] = [];
afterEach(() => {
  for (const dir of projects.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

const FAKE_BUILD = [
  'if (process.env.SCRATCH_BUILD_FAILS) process.exit(3);',
  "const fs = require('node:fs');",
  "fs.mkdirSync('dist/src', { recursive: true }); fs.mkdirSync('dist/ui', { recursive: true });",
  // Printed as two words joined, so that npm's echo of this command is not mistaken for the server's line.
  "fs.writeFileSync('dist/src/main.js', 'console.log([\"server\", \"ran\"].join(\" \"));');",
  "fs.writeFileSync('dist/ui/index.html', '');",
  "fs.appendFileSync('build.log', 'built\\n');",
].join(' ');

function scratchProject(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-build-check-'));
  projects.push(dir);
  const real = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  fs.mkdirSync(path.join(dir, 'scripts'));
  for (const script of ['build-if-stale.mjs', 'start.mjs']) fs.copyFileSync(path.join(root, 'scripts', script), path.join(dir, 'scripts', script));
  const scripts = { build: `node -e ${JSON.stringify(FAKE_BUILD)}`, prepare: real.scripts.prepare, start: real.scripts.start };
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'scratch', version: '1.0.0', private: true, type: 'module', scripts }));
  fs.mkdirSync(path.join(dir, 'src'));
  fs.writeFileSync(path.join(dir, 'src', 'app.ts'), 'export const a = 1;\n');
  return dir;
}

function run(dir: string, command: string, args: string[], env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(command, args, {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, npm_config_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false', ...env },
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

const builds = (dir: string) => fs.readFileSync(path.join(dir, 'build.log'), 'utf8').split('\n').filter(Boolean).length;

// No database involved: the PostgreSQL run skips them.
describe.skipIf(onPostgresServer)('the build', () => {
  it('is made by npm ci (the prepare script), and npm start then starts the server without building', () => {
    const dir = scratchProject();
    expect(run(dir, 'npm', ['install']).status).toBe(0); // writes the lock file npm ci needs
    fs.rmSync(path.join(dir, 'dist'), { recursive: true });
    fs.rmSync(path.join(dir, 'build.log'));

    const install = run(dir, 'npm', ['ci']);
    expect(install.status).toBe(0);
    expect(install.stderr).toContain('no build yet: building (npm run build)');
    expect(builds(dir)).toBe(1);

    const start = run(dir, 'npm', ['start']);
    expect(start.status).toBe(0);
    expect(start.stdout).toContain('server ran');
    expect(start.stderr).not.toContain('building');
    expect(builds(dir)).toBe(1);
  });

  it('is made again by npm start when a source changed since, and only then', () => {
    const dir = scratchProject();
    expect(run(dir, 'node', ['scripts/build-if-stale.mjs']).status).toBe(0);
    expect(builds(dir)).toBe(1);

    fs.writeFileSync(path.join(dir, 'src', 'app.ts'), 'export const a = 2;\n');
    const start = run(dir, 'npm', ['start']);
    expect(start.status).toBe(0);
    expect(start.stderr).toContain('sources changed since the last build: building (npm run build)');
    expect(start.stdout).toContain('server ran');
    expect(builds(dir)).toBe(2);

    const again = run(dir, 'node', ['scripts/build-if-stale.mjs']);
    expect(again).toMatchObject({ status: 0, stderr: '' });
    expect(builds(dir)).toBe(2);
  });

  it('is made again when one of its outputs is missing', () => {
    const dir = scratchProject();
    expect(run(dir, 'node', ['scripts/build-if-stale.mjs']).status).toBe(0);
    fs.rmSync(path.join(dir, 'dist', 'ui', 'index.html'));
    const check = run(dir, 'node', ['scripts/build-if-stale.mjs']);
    expect(check.stderr).toContain('no build yet: building (npm run build)');
    expect(builds(dir)).toBe(2);
  });

  it('that failed stops npm start with its status, and is tried again on the next start', () => {
    const dir = scratchProject();
    expect(run(dir, 'node', ['scripts/build-if-stale.mjs']).status).toBe(0);
    fs.writeFileSync(path.join(dir, 'src', 'app.ts'), 'export const a = 2;\n');

    const failed = run(dir, 'npm', ['start'], { SCRATCH_BUILD_FAILS: '1' });
    expect(failed.status).not.toBe(0);
    expect(failed.stdout).not.toContain('server ran');
    expect(builds(dir)).toBe(1);

    const start = run(dir, 'npm', ['start']);
    expect(start.status).toBe(0);
    expect(start.stderr).toContain('sources changed since the last build: building (npm run build)');
    expect(start.stdout).toContain('server ran');
    expect(builds(dir)).toBe(2);
  });
});
