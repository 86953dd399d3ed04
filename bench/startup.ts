/**
 * npm run bench:startup: how long a start takes, from the command's spawn to the first 200 of
 * GET /v1/health, for a first start (an empty data directory) and a restart (the directory the first
 * start left), each RUNS times, the variants taken in turn so that the machine's load falls on all of them.
 *
 *   npm start, first start / restart   what a user runs: npm, the prestart build check, the server
 *   node dist/src/main.js, restart     the same server without npm and the check
 *   baseline: initdb, first start      the same build without its embedded-database template (a copy of
 *                                      dist/ beside a link to node_modules): PGlite runs initdb
 *   baseline: build on every start     `npm run build && node dist/src/main.js`, what `npm start` did
 *                                      before it built only when sources changed
 *   old <ref>: npm start, first start / restart
 *                                      with --old <git ref>: that commit's `npm start`, built in a temporary
 *                                      directory (git archive) against this checkout's node_modules
 *
 * Builds first when the build is stale (scripts/build-if-stale.mjs). Usage:
 *   npm run bench:startup -- [--runs 5] [--old <git ref>] [--no-build-baseline]
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const root = path.resolve(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: { runs: { type: 'string', default: '5' }, old: { type: 'string' }, 'no-build-baseline': { type: 'boolean', default: false } },
});
const RUNS = Number(args.runs);
if (!Number.isInteger(RUNS) || RUNS < 1 || RUNS > 100) throw new Error('--runs must be an integer from 1 to 100');
const START_TIMEOUT_MS = 300_000;

interface Variant {
  name: string;
  /** An empty data directory (a first start), or the one the variant named here left (a restart). */
  dataDirOf?: string;
  cwd: string;
  command: string;
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-bench-startup-'));

/** A tree of `source`'s files beside a link to this checkout's node_modules, so that node resolves packages from it. */
function besideNodeModules(name: string, fill: (dir: string) => void): string {
  const dir = path.join(work, name);
  fs.mkdirSync(dir);
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
  fill(dir);
  return dir;
}

function requireBuild(): void {
  // The first-start and restart variants time a start, not a build: bring the build up to date first.
  execFileSync('node', ['scripts/build-if-stale.mjs'], { cwd: root, stdio: 'inherit' });
  for (const file of ['dist/src/main.js', 'dist/ui/index.html']) {
    if (!fs.existsSync(path.join(root, file))) throw new Error(`${file} is missing: run npm run build first`);
  }
  if (!fs.existsSync(path.join(root, 'dist/pglite-template'))) throw new Error('dist/pglite-template is missing: run npm run build first');
}

function variants(): Variant[] {
  requireBuild();
  const noTemplate = besideNodeModules('no-template', (dir) => {
    const template = path.join(root, 'dist', 'pglite-template');
    fs.cpSync(path.join(root, 'dist'), path.join(dir, 'dist'), { recursive: true, filter: (file) => file !== template });
    fs.copyFileSync(path.join(root, 'package.json'), path.join(dir, 'package.json'));
  });
  const list: Variant[] = [
    { name: 'npm start, first start', cwd: root, command: 'npm start' },
    { name: 'npm start, restart', dataDirOf: 'npm start, first start', cwd: root, command: 'npm start' },
    { name: 'node dist/src/main.js, restart', dataDirOf: 'npm start, first start', cwd: root, command: 'node dist/src/main.js' },
    { name: 'baseline: initdb, first start', cwd: noTemplate, command: 'node dist/src/main.js' },
  ];
  if (!args['no-build-baseline']) {
    list.push({ name: 'baseline: build on every start, restart', dataDirOf: 'npm start, first start', cwd: root, command: 'npm run build >/dev/null && node dist/src/main.js' });
  }
  if (args.old) {
    const ref = args.old;
    const old = besideNodeModules('old', (dir) => {
      execFileSync('sh', ['-c', `git -C "${root}" archive "${ref}" | tar -x -C "${dir}"`], { stdio: 'inherit' });
      console.log(`building ${ref} in ${dir}`);
      // Through its own build check where it has one, so that its `npm start` finds the build current.
      const check = fs.existsSync(path.join(dir, 'scripts/build-if-stale.mjs'));
      execFileSync(check ? 'node' : 'npm', check ? ['scripts/build-if-stale.mjs'] : ['run', 'build'], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
    });
    list.push(
      { name: `old ${ref}: npm start, first start`, cwd: old, command: 'npm start' },
      { name: `old ${ref}: npm start, restart`, dataDirOf: `old ${ref}: npm start, first start`, cwd: old, command: 'npm start' },
    );
  }
  return list;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Milliseconds from spawning `command` until GET /v1/health answers 200; the command is then stopped. */
async function timeStart(variant: Variant, dataDir: string): Promise<number> {
  const port = await freePort();
  const started = performance.now();
  // Its own process group: npm does not pass SIGTERM on to the server its shell started.
  const child = spawn('sh', ['-c', variant.command], {
    cwd: variant.cwd,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' },
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  let exited = false;
  const exit = new Promise<void>((resolve) => child.on('exit', () => ((exited = true), resolve())));
  let elapsed: number | undefined;
  while (!exited && performance.now() - started < START_TIMEOUT_MS) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/v1/health`)).ok) {
        elapsed = performance.now() - started;
        break;
      }
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  if (!exited) process.kill(-child.pid!, 'SIGTERM');
  await exit;
  if (elapsed === undefined) throw new Error(`${variant.name}: no healthy server within ${START_TIMEOUT_MS} ms (${exited ? 'it exited' : 'timed out'}): ${stderr.slice(-2000)}`);
  return elapsed;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};
const seconds = (ms: number) => (ms / 1000).toFixed(2);

try {
  const list = variants();
  const times = new Map<string, number[]>(list.map((v) => [v.name, []]));
  const loads: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const dataDirs = new Map<string, string>();
    for (const variant of list) {
      const dataDir = variant.dataDirOf ? dataDirs.get(variant.dataDirOf)! : fs.mkdtempSync(path.join(work, 'data-'));
      dataDirs.set(variant.name, dataDir);
      loads.push(os.loadavg()[0]);
      const ms = await timeStart(variant, dataDir);
      times.get(variant.name)!.push(ms);
      console.log(`run ${run + 1}/${RUNS} ${variant.name}: ${seconds(ms)} s (load average ${os.loadavg()[0].toFixed(2)})`);
    }
    for (const dir of new Set(dataDirs.values())) fs.rmSync(dir, { recursive: true, force: true });
  }

  console.log(`\n${RUNS} runs each, ${os.cpus().length} cores, 1-minute load average ${Math.min(...loads).toFixed(1)} to ${Math.max(...loads).toFixed(1)} (median ${median(loads).toFixed(1)})`);
  console.log('| variant | median | min | max |\n|---|---:|---:|---:|');
  for (const [name, values] of times) console.log(`| ${name} | ${seconds(median(values))} s | ${seconds(Math.min(...values))} s | ${seconds(Math.max(...values))} s |`);
  const ratio = (baseline: string, against: string) => {
    const base = times.get(baseline);
    const now = times.get(against);
    if (base && now) console.log(`${baseline} / ${against}: ${(median(base) / median(now)).toFixed(2)}x (medians)`);
  };
  ratio('baseline: initdb, first start', 'npm start, first start');
  ratio('baseline: build on every start, restart', 'npm start, restart');
  ratio('npm start, restart', 'node dist/src/main.js, restart');
  if (args.old) {
    ratio(`old ${args.old}: npm start, first start`, 'npm start, first start');
    ratio(`old ${args.old}: npm start, restart`, 'npm start, restart');
  }
} finally {
  fs.rmSync(work, { recursive: true, force: true });
}
