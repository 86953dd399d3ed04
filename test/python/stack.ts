/**
 * The trainyard stack the Python client suites run against, all on loopback: the fake engine (in this
 * process), a real trainyard server on a fresh DATA_DIR with the engine in its backends file, and the
 * worker CLI running the fixture trainer. Prints one JSON line `{"ready": {...}}` on stdout when all is
 * up, then serves a small control port for the tests (engine faults, recorded requests) until stdin
 * closes or SIGTERM, and then stops everything it started.
 *
 * Usage: tsx test/python/stack.ts <work dir>
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { startFakeEngine, type FakeBehaviour } from '../fakes/engine.js';

const BASE_MODEL = 'fake/base-model';
const workDir = path.resolve(process.argv[2] ?? fail('usage: stack.ts <work dir>'));
const root = path.resolve(import.meta.dirname, '../..');
const tsx = path.join(root, 'node_modules/tsx/dist/cli.mjs');

function fail(message: string): never {
  process.stderr.write(`stack: ${message}\n`);
  process.exit(2);
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const children: ChildProcess[] = [];
function start(name: string, args: string[], env: Record<string, string>): ChildProcess {
  const log = fs.openSync(path.join(workDir, `${name}.log`), 'a');
  const child = spawn(process.execPath, [tsx, ...args], { cwd: root, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', log, log] });
  child.once('exit', (code, signal) => {
    if (!stopping) fail(`${name} exited (${code ?? signal}); see ${path.join(workDir, `${name}.log`)}`);
  });
  children.push(child);
  return child;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 180_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function api(url: string, key: string, method: string, body?: unknown): Promise<any> {
  const response = await fetch(url, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) fail(`${method} ${url}: ${response.status} ${text}`);
  return JSON.parse(text);
}

let stopping = false;
async function stop(why = "stop"): Promise<void> {
  process.stderr.write(`stack: stopping (${why})\n`);
  if (stopping) return;
  stopping = true;
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
          setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
        }),
    ),
  );
  await engine.close();
  process.exit(0);
}

fs.mkdirSync(workDir, { recursive: true });
const engine = await startFakeEngine({ models: [BASE_MODEL] });
const backendsFile = path.join(workDir, 'backends.json');
fs.writeFileSync(
  backendsFile,
  JSON.stringify({ backends: [{ name: 'fake', kind: 'openai-compatible', replicas: [engine.url], models: [BASE_MODEL], runtime_lora: true }] }),
);

const dataDir = path.join(workDir, 'data');
const adapters = path.join(workDir, 'adapters');
const port = await freePort();
const url = `http://127.0.0.1:${port}`;
start('server', ['src/main.ts'], {
  PORT: String(port),
  HOST: '127.0.0.1',
  DATA_DIR: dataDir,
  BACKENDS_FILE: backendsFile,
  TRAINABLE_BASE_MODELS: BASE_MODEL,
  LOG_LEVEL: 'info',
  USAGE_FLUSH_INTERVAL_MS: '50',
  // Checkpoints are accepted only under the worker's --output-dir.
  CHECKPOINT_URI_PREFIXES: `${adapters}/`,
});
await until('the server', async () => ((await fetch(`${url}/v1/health`)).ok ? true : undefined));
const adminKey = await until('the admin key', async () => fs.readFileSync(path.join(dataDir, 'admin-api-key'), 'utf8').trim() || undefined);

// A user of its own for the clients (its personal entity is its username), and a worker key.
const username = `py${process.pid}`;
const user = await api(`${url}/v1/admin/users`, adminKey, 'POST', { username });
const { key } = await api(`${url}/v1/admin/keys`, adminKey, 'POST', { username });
const worker = await api(`${url}/v1/admin/keys`, adminKey, 'POST', { username, kind: 'worker' });
const inputsDir = path.join(workDir, 'job-inputs');
start(
  'worker',
  [
    'src/worker/main.ts',
    '--server', url,
    '--base-models', BASE_MODEL,
    '--work-dir', path.join(workDir, 'worker'),
    '--output-dir', adapters,
    '--poll-seconds', '1',
    '--event-window-ms', '50',
    '--',
    process.execPath,
    path.join(root, 'test/python/recording-trainer.mjs'),
  ],
  { TRAINYARD_WORKER_KEY: worker.key, TRAINER_RECORD_DIR: inputsDir },
);

// The control port: GET /requests (what the engine received), GET /inputs/<job id> (the inputs the
// trainer got, as JSON lines), POST /behaviour {behaviour, times} (the engine's next answers).
const control = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'GET' && req.url === '/requests') return send(200, { requests: engine.requests, loads: Object.fromEntries(engine.loads) });
    const inputs = /^\/inputs\/([\w-]+)$/.exec(req.url ?? '');
    if (req.method === 'GET' && inputs) {
      const file = path.join(inputsDir, `${inputs[1]}.jsonl`);
      if (!fs.existsSync(file)) return send(404, { error: 'no such job' });
      return send(200, { lines: fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line)) });
    }
    if (req.method === 'POST' && req.url === '/behaviour') {
      const { behaviour, times } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { behaviour: FakeBehaviour; times?: number };
      engine.setBehaviour(behaviour, times);
      return send(200, { ok: true });
    }
    send(404, { error: 'not found' });
  });
});
await new Promise<void>((resolve) => control.listen(0, '127.0.0.1', resolve));

process.on('SIGTERM', () => void stop('SIGTERM'));
process.on('SIGINT', () => void stop('SIGINT'));
process.stdin.on('end', () => void stop('stdin closed'));
process.stdin.resume();
process.stdout.write(
  JSON.stringify({
    ready: {
      url,
      admin_key: adminKey,
      username,
      entity: user.entity ?? username,
      key,
      base_model: BASE_MODEL,
      engine_url: engine.url,
      control_url: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
      data_dir: dataDir,
    },
  }) + '\n',
);
