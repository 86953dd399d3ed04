/**
 * Schema-driven fuzzing of the whole API with schemathesis (PyPI), from openapi/openapi.json, against a
 * real trainyard process on loopback with its bootstrap admin key. `npm run test:fuzz`.
 *
 * - The tool lives in test/fuzz/.venv, made from test/fuzz/requirements.lock (exact pins) on first run
 *   and remade when the lock changes.
 * - The database is a fresh embedded PGlite in a temporary DATA_DIR, or, with TEST_DATABASE_URL set, a
 *   fresh database created on that PostgreSQL server and dropped afterwards.
 * - Checks: no 5xx, and every status code, content type and body conforms to the document.
 * - Bounded: FUZZ_MAX_EXAMPLES cases per operation and phase (default 10), a fixed FUZZ_SEED (default 1).
 * - Two schemathesis processes at once, over the tracing API and over the rest (SHARDS).
 *   Reports go to test/fuzz/report/<set>/ (JUnit), the server's log to test/fuzz/report/server.log.
 * Extra arguments are passed to `schemathesis run` (e.g. --include-path-regex '^/traces'), which then runs once.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import pg from 'pg';

const ROOT = path.resolve(import.meta.dirname, '../..');
const FUZZ = path.join(ROOT, 'test/fuzz');
const VENV = path.join(FUZZ, '.venv');
const LOCK = path.join(FUZZ, 'requirements.lock');
const REPORT = path.join(FUZZ, 'report');
const CHECKS = ['not_a_server_error', 'status_code_conformance', 'content_type_conformance', 'response_schema_conformance'];

/** The venv from the lock: made when missing, remade when the lock changed since it was made. */
function ensureVenv(): string {
  const stamp = path.join(VENV, '.lock-sha256');
  const digest = createHash('sha256').update(fs.readFileSync(LOCK)).digest('hex');
  const bin = path.join(VENV, 'bin', 'schemathesis');
  if (fs.existsSync(bin) && fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === digest) return bin;
  console.log(`fuzz: creating ${path.relative(ROOT, VENV)} from ${path.relative(ROOT, LOCK)}`);
  fs.rmSync(VENV, { recursive: true, force: true });
  execFileSync(process.env.PYTHON ?? 'python3', ['-m', 'venv', VENV], { stdio: 'inherit' });
  execFileSync(path.join(VENV, 'bin', 'pip'), ['install', '--quiet', '--no-deps', '--no-compile', '--disable-pip-version-check', '-r', LOCK], {
    stdio: 'inherit',
  });
  fs.writeFileSync(stamp, digest);
  return bin;
}

/**
 * openapi/openapi.json with one narrowing, so that the run stays short: a claim long-polls up to
 * `wait_seconds` (0..30) when no job is queued, so the fuzz run's claims wait at most 1 s.
 */
function fuzzDocument(): string {
  const document = JSON.parse(fs.readFileSync(path.join(ROOT, 'openapi/openapi.json'), 'utf8'));
  document.paths['/v1/workers/claim'].post.requestBody.content['application/json'].schema.properties.wait_seconds.maximum = 1;
  const file = path.join(REPORT, 'openapi.json');
  fs.writeFileSync(file, JSON.stringify(document));
  return file;
}

interface Database {
  url: string;
  drop(): Promise<void>;
}

/** A fresh database on the TEST_DATABASE_URL server, or none (the server's embedded PGlite). */
async function freshDatabase(): Promise<Database | undefined> {
  const server = process.env.TEST_DATABASE_URL;
  if (!server) return undefined;
  const name = `fuzz_${Date.now()}_${randomBytes(3).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(server);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: server });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}

/** Starts src/main.ts; resolves with its URL and the admin key it printed. */
async function startServer(env: NodeJS.ProcessEnv, log: fs.WriteStream) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (chunk) => {
    out += chunk;
    log.write(chunk);
  });
  child.stderr.on('data', (chunk) => log.write(chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const started = await new Promise<{ key: string; url: string }>((resolve, reject) => {
    const timer = setInterval(() => {
      const match = out.match(/\n {4}(ty_\w+)\n[\s\S]*?Try: curl -H "Authorization: Bearer ty_\w+" (http:\/\/[\d.:]+)\/v1\/system-check/);
      if (match) {
        clearInterval(timer);
        resolve({ key: match[1], url: match[2] });
      }
    }, 100);
    void exited.then((code) => {
      clearInterval(timer);
      reject(new Error(`the server exited (${code}) before it was ready; see ${path.relative(ROOT, log.path as string)}`));
    });
  });
  return { ...started, child, exited };
}

async function main(): Promise<number> {
  const schemathesis = ensureVenv();
  fs.rmSync(REPORT, { recursive: true, force: true });
  fs.mkdirSync(REPORT, { recursive: true });
  const log = fs.createWriteStream(path.join(REPORT, 'server.log'));
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-fuzz-'));
  const database = await freshDatabase();
  const where = database ? 'PostgreSQL' : 'PGlite';
  let server: Awaited<ReturnType<typeof startServer>> | undefined;
  try {
    server = await startServer(
      {
        ...process.env,
        PORT: '0',
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        DATABASE_URL: database?.url ?? '',
        BOOTSTRAP_ADMIN: 'true',
        LOG_LEVEL: 'warn',
        // The claim below keeps the system check's gpu_queue passing for the whole run, so /v1/system-check
        // answers 200 and any 5xx from it is a finding.
        WORKER_SEEN_SECONDS: '86400',
      },
      log,
    );
    console.log(`fuzz: trainyard on ${where} at ${server.url}`);
    const workerKey = await fetch(`${server.url}/v1/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'admin', kind: 'worker', name: 'fuzz worker' }),
    }).then(async (response) => ((await response.json()) as { key: string }).key);
    const claim = await fetch(`${server.url}/v1/workers/claim`, {
      method: 'POST',
      headers: { authorization: `Bearer ${workerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ worker_id: 'fuzz-worker', wait_seconds: 0 }),
    });
    if (!claim.ok) throw new Error(`the fuzz worker's claim answered ${claim.status}: ${await claim.text()}`);
    const shards: Shard[] = process.argv.length > 2 ? [{ name: 'selected', filter: [] }] : SHARDS;
    const document = fuzzDocument();
    const runs = shards.map((shard) =>
      runShard(schemathesis, shard, document, server!.url, { FUZZ_ADMIN_KEY: server!.key, FUZZ_WORKER_KEY: workerKey }),
    );
    let passed = 0;
    let failed = 0;
    for (const run of await Promise.all(runs)) {
      passed += run.passed;
      failed += run.failed + (run.code !== 0 && run.failed === 0 ? 1 : 0);
    }
    // A closing line of our own: schemathesis ends on a pytest-style "== 2 warnings in 194s ==" banner,
    // which reads as a run of no tests to anything that parses pytest's closing line.
    console.log(`fuzz: ${passed} passed, ${failed} failed`);
    return failed === 0 ? 0 : 1;
  } finally {
    if (server) {
      server.child.kill('SIGTERM');
      await server.exited;
    }
    log.end();
    await database?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * The operations in two sets, each run by a schemathesis process of its own at the same time: generating
 * cases takes most of a run's CPU, and one process (threads share Python's GIL) keeps only one core busy.
 * The tracing API's query bodies take longer to generate than all the other operations together, so its
 * cost routes go with the others to even the two out. Extra arguments on the command line select
 * operations themselves, and run as one set.
 */
const SHARDS: Shard[] = [
  { name: 'tracing', filter: ['--include-path-regex', '^/traces/(?!cost/)'] },
  { name: 'others', filter: ['--exclude-path-regex', '^/traces/(?!cost/)'] },
];

/** A set of operations: its name (and report folder) and the schemathesis arguments that select it. */
interface Shard {
  name: string;
  filter: string[];
}

/** One schemathesis process over a shard's operations; its output is relayed with the shard's name. */
async function runShard(
  schemathesis: string,
  shard: Shard,
  document: string,
  url: string,
  keys: Record<string, string>,
): Promise<{ code: number; passed: number; failed: number }> {
  // Each in a folder of its own: the report, and the tool's caches (.schemathesis/, .hypothesis/).
  const folder = path.join(REPORT, shard.name);
  fs.mkdirSync(folder, { recursive: true });
  const args = [
    '--config-file',
    path.join(FUZZ, 'schemathesis.toml'),
    'run',
    document,
    '--url',
    url,
    '--checks',
    CHECKS.join(','),
    '--max-examples',
    process.env.FUZZ_MAX_EXAMPLES ?? '10',
    '--seed',
    process.env.FUZZ_SEED ?? '1',
    // One worker: hypothesis describes strategies with `ast` from several threads otherwise, which
    // CPython 3.11 can fail on ("AST constructor recursion depth mismatch"), erroring the run.
    '--workers',
    '1',
    '--request-timeout',
    '30',
    '--suppress-health-check',
    'all',
    '--report',
    'junit',
    '--report-dir',
    folder,
    ...shard.filter,
    ...process.argv.slice(2),
  ];
  const child = spawn(schemathesis, args, { cwd: folder, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...keys } });
  const stderr = relayLines(child.stderr!, `[${shard.name}] `, process.stderr);
  const summary = relaySummary(child.stdout!, `[${shard.name}] `);
  const code = await new Promise<number>((resolve) => child.on('exit', (exitCode) => resolve(exitCode ?? 1)));
  await stderr;
  return { code, ...(await summary) };
}

/** Relays a stream line by line, each line after `prefix`. */
async function relayLines(stream: NodeJS.ReadableStream, prefix: string, to: NodeJS.WritableStream): Promise<void> {
  for await (const line of readline.createInterface({ input: stream })) to.write(`${prefix}${line}\n`);
}

/**
 * Relays schemathesis's output line by line, reading its test-case counts ("N generated, N passed, N failed")
 * and turning its closing "=== ... in Ns ===" banner into a plain line.
 */
async function relaySummary(stream: NodeJS.ReadableStream, prefix: string): Promise<{ passed: number; failed: number }> {
  let passed = 0;
  let failed = 0;
  for await (const line of readline.createInterface({ input: stream })) {
    const counts = /^\s*\d+ generated, (.*)$/.exec(line);
    if (counts) {
      passed = Number(/(\d+) passed/.exec(counts[1]!)?.[1] ?? 0);
      failed = Number(/(\d+) failed/.exec(counts[1]!)?.[1] ?? 0) + Number(/(\d+) errored/.exec(counts[1]!)?.[1] ?? 0);
    }
    const banner = /^=+ (.* in [\d.]+s) =+$/.exec(line);
    console.log(`${prefix}${banner ? `schemathesis: ${banner[1]}` : line}`);
  }
  return { passed, failed };
}

process.exitCode = await main();
