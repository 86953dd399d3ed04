/**
 * npm run bench:training: trajectory logging and RL job creation through the HTTP API on a loopback port,
 * against a baseline in the same run that inserts the same rows with multi-row INSERTs straight into the
 * database. 1,000 groups x 8 trajectories of realistic size: multi-turn conversations whose assistant turns
 * are dumped OpenAI Choices carrying `token_id:N` logprobs, as ART sends them. Target: the API at >= 50%
 * of the baseline. PGlite in a temporary directory by default; DATABASE_URL=postgres://... for a server.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';

const GROUPS = 1_000;
const TRAJECTORIES = 8;
const GROUPS_PER_REQUEST = 50;

function choice(turn: number, tokens: number): Record<string, unknown> {
  const content = Array.from({ length: tokens }, (_, i) => ({
    token: `token_id:${(turn * 7919 + i * 31) % 151_000}`,
    bytes: [32, 116, 104, 101],
    logprob: -Math.random() * 3,
    top_logprobs: [],
  }));
  return {
    finish_reason: 'tool_calls',
    index: 0,
    logprobs: { content, refusal: null },
    message: {
      role: 'assistant',
      content: 'Let me slide the tiles left to merge the two 8s. '.repeat(4),
      refusal: null,
      annotations: null,
      audio: null,
      function_call: null,
      tool_calls: [{ id: `call_${turn}`, type: 'function', function: { name: 'move', arguments: '{"direction":"left"}' } }],
    },
    stop_reason: null,
    token_ids: content.map((_, i) => 1000 + i),
  };
}

function trajectory(seed: number): Record<string, unknown> {
  const messages: unknown[] = [
    { role: 'system', content: 'You are playing 2048. Call the move tool with a direction each turn. Aim for the 2048 tile.' },
  ];
  for (let turn = 0; turn < 3; turn++) {
    messages.push({ role: 'user', content: `Board:\n2 4 8 8\n0 2 4 16\n0 0 2 4\n0 0 0 2\nTurn ${turn} of game ${seed}.` });
    messages.push(choice(turn, 60));
    messages.push({ role: 'tool', tool_call_id: `call_${turn}`, content: '{"ok":true,"score":128}' });
  }
  return {
    messages_and_choices: messages,
    tools: [{ type: 'function', function: { name: 'move', description: 'Slide the tiles', parameters: { type: 'object', properties: { direction: { type: 'string' } } } } }],
    reward: (seed % 5) / 4,
    metrics: { max_tile: 256, moves: 3, won: false },
    metadata: { scenario_id: `s${seed >> 3}` },
    logs: [],
  };
}

const groups = Array.from({ length: GROUPS }, (_, g) => ({
  trajectories: Array.from({ length: TRAJECTORIES }, (_, t) => trajectory(g * TRAJECTORIES + t)),
  metadata: { scenario_id: `s${g}` },
}));
const batches: (typeof groups)[] = [];
for (let i = 0; i < groups.length; i += GROUPS_PER_REQUEST) batches.push(groups.slice(i, i + GROUPS_PER_REQUEST));

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-bench-'));
const config = loadConfig({
  ...(process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}),
  DATA_DIR: dataDir,
  LOG_LEVEL: 'silent',
  BOOTSTRAP_ADMIN: 'false',
  BODY_LIMIT_MB: '256',
});
const app = await buildApp(config);
await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
if (!address || typeof address === 'string') throw new Error('not listening');
const base = `http://127.0.0.1:${address.port}`;

const username = `bench-${crypto.randomUUID().slice(0, 8)}`;
await app.auth.createUser({ username });
const { key } = await app.auth.createKey({ username });
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

async function api(method: string, url: string, body: string): Promise<any> {
  const response = await fetch(`${base}${url}`, { method, headers, body });
  if (!response.ok) throw new Error(`${method} ${url} answered ${response.status}: ${await response.text()}`);
  return response.json();
}

const model = await api('POST', '/v1/preview/models', JSON.stringify({ project: 'bench', name: 'agent', base_model: 'bench-base' }));

/** The baseline: the same groups, serialised and inserted 1,000 rows (or 8 MB) per statement. */
async function insertRows(insert: (rows: string[]) => Promise<void>): Promise<void> {
  let rows: string[] = [];
  let bytes = 0;
  for (const group of groups) {
    const json = JSON.stringify(group);
    if (rows.length >= 1000 || bytes + json.length > 8 * 1024 * 1024) {
      await insert(rows);
      rows = [];
      bytes = 0;
    }
    rows.push(json);
    bytes += json.length;
  }
  if (rows.length) await insert(rows);
}

async function baselineLog(): Promise<void> {
  const logId = crypto.randomUUID();
  let seq = 0;
  await app.db.transaction().execute((trx) =>
    insertRows(async (rows) => {
      await trx
        .insertInto('trajectory_logs')
        .values(rows.map((json) => ({ model_id: model.id, log_id: logId, split: 'train', step: 0, seq: seq++, payload: sql`${json}::jsonb` as never })))
        .execute();
    }),
  );
}

async function baselineJobs(): Promise<void> {
  for (const batch of batches) {
    const jobId = crypto.randomUUID();
    await app.db.transaction().execute(async (trx) => {
      await sql`insert into training_jobs (id, model_id, kind, status, max_attempts, config, num_inputs)
        values (${jobId}, ${model.id}, 'rl', 'QUEUED', 1, '{}'::jsonb, ${batch.length})`.execute(trx);
      await trx
        .insertInto('job_inputs')
        .values(batch.map((group, seq) => ({ job_id: jobId, seq, payload: sql`${JSON.stringify(group)}::jsonb` as never })))
        .execute();
    });
  }
}

// Request bodies are serialised before the clock starts: that is the client's work, not the server's.
const logBodies = batches.map((batch) => JSON.stringify({ split: 'train', trajectory_groups: batch }));
const jobBodies = batches.map((batch) => JSON.stringify({ model_id: model.id, trajectory_groups: batch, experimental_config: { learning_rate: 5e-6 } }));
const megabytes = logBodies.reduce((sum, body) => sum + Buffer.byteLength(body), 0) / 1e6;

async function apiLog(): Promise<void> {
  for (const body of logBodies) await api('POST', `/v1/preview/models/${model.id}/log`, body);
}

async function apiJobs(): Promise<void> {
  for (const body of jobBodies) await api('POST', '/v1/preview/training-jobs', body);
}

async function timed(run: () => Promise<void>): Promise<number> {
  const started = performance.now();
  await run();
  return (performance.now() - started) / 1000;
}

// Warm up both paths on a small slice (JIT, connection, first statements), then measure.
await api('POST', `/v1/preview/models/${model.id}/log`, JSON.stringify({ split: 'val', trajectory_groups: groups.slice(0, 5) }));

const results: { phase: string; seconds: number }[] = [];
results.push({ phase: 'log: baseline (multi-row INSERT)', seconds: await timed(baselineLog) });
results.push({ phase: 'log: POST /v1/preview/models/{id}/log', seconds: await timed(apiLog) });
results.push({ phase: 'jobs: baseline (multi-row INSERT)', seconds: await timed(baselineJobs) });
results.push({ phase: 'jobs: POST /v1/preview/training-jobs', seconds: await timed(apiJobs) });

const cpus = os.cpus();
console.log(`trainyard training bench: ${GROUPS} groups x ${TRAJECTORIES} trajectories, ${megabytes.toFixed(1)} MB of JSON, ${GROUPS_PER_REQUEST} groups per request`);
console.log(`database: ${app.database.kind}; node ${process.version}; ${cpus.length} x ${cpus[0]?.model ?? 'cpu'}`);
console.log('');
console.log(`${'phase'.padEnd(42)} ${'seconds'.padStart(8)} ${'MB/s'.padStart(8)} ${'groups/s'.padStart(9)} ${'vs baseline'.padStart(12)}`);
for (const [index, { phase, seconds }] of results.entries()) {
  const baseline = results[index - (index % 2)].seconds;
  const ratio = index % 2 === 1 ? `${((baseline / seconds) * 100).toFixed(0)}%` : '';
  console.log(
    `${phase.padEnd(42)} ${seconds.toFixed(2).padStart(8)} ${(megabytes / seconds).toFixed(1).padStart(8)} ${(GROUPS / seconds).toFixed(0).padStart(9)} ${ratio.padStart(12)}`,
  );
}

await app.close();
fs.rmSync(dataDir, { recursive: true, force: true });
