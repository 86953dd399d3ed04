import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { AuthService } from '../../src/auth/service.js';
import { createPgPool, postgresHandle, type DatabaseHandle } from '../../src/db/index.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, writeBackendsFile } from '../inference/gateway-helpers.js';
import { groupGenerationA } from '../training/fixtures.js';
import { onPostgresServer } from '../helpers/database.js';
import { adminPool, databaseUrl } from '../helpers/postgres.js';

/**
 * Operators run several trainyard processes behind a load balancer on one PostgreSQL server
 * (README, "Several processes"). Three real server processes (src/main.ts) share one fresh database.
 */

const PROCESSES = 3;
const AUTH_CACHE_TTL_MS = 400;
const SWEEP_MS = 100;

interface Server {
  url: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}

let databaseName: string;
let database: DatabaseHandle;
let sql: pg.Pool;
let engine: FakeEngine;
let servers: Server[] = [];
const dataDirs: string[] = [];
let adminKey: string;
let user: { entity: string; key: string; keyId: string };
let workerKey: string;

async function startServer(env: Record<string, string>): Promise<Server> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-multi-'));
  dataDirs.push(dataDir);
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    env: { ...process.env, ...env, DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'info', BOOTSTRAP_ADMIN: 'false' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.on('error', (error) => (out += `\n${error.stack}`)); // unheard, a failed spawn or kill would be an uncaught error
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  for (let waited = 0; ; waited += 100) {
    const match = out.match(/Server listening at (http:\/\/127\.0\.0\.1:\d+)/);
    if (match) return { url: match[1], child, exited };
    if (child.exitCode !== null || waited > 60_000) throw new Error(`a server did not start:\n${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function call(server: Server, key: string, method: string, url: string, body?: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${server.url}${url}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined, text };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Queues one RL job on each of `count` new models (a model runs its jobs one at a time). */
async function queueJobs(count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const server = servers[i % servers.length];
    const model = await call(server, user.key, 'POST', '/v1/preview/models', {
      entity: null,
      project: 'multi',
      name: `agent-${randomUUID().slice(0, 8)}`,
      base_model: 'Qwen/Qwen3-14B',
      return_existing: true,
    });
    expect(model.status, model.text).toBe(200);
    const job = await call(server, user.key, 'POST', '/v1/preview/training-jobs', { model_id: model.body.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    ids.push(job.body.id);
  }
  return ids;
}

/** Every queued job, claimed by workers on all processes at once; answers the job ids of the 200s. */
async function claimAll(claimsPerProcess: number): Promise<string[]> {
  const claims = servers.flatMap((server, p) =>
    Array.from({ length: claimsPerProcess }, (_, i) => call(server, workerKey, 'POST', '/v1/workers/claim', { worker_id: `w-${p}-${i}` })),
  );
  const replies = await Promise.all(claims);
  for (const reply of replies) expect([200, 204], reply.text).toContain(reply.status);
  return replies.filter((r) => r.status === 200).map((r) => r.body.job.id as string);
}

describe.skipIf(!onPostgresServer)('several processes on one PostgreSQL database (runs only with TEST_DATABASE_URL)', () => {
  beforeAll(async () => {
    databaseName = `${inject('pgTemplate').replace('tpl', 't')}_multi_${randomUUID().slice(0, 8)}`;
    const admin = adminPool();
    await admin.query(`create database ${databaseName} template ${inject('pgTemplate')}`);
    await admin.end();
    database = postgresHandle(createPgPool(databaseUrl(databaseName), 2));
    sql = createPgPool(databaseUrl(databaseName), 2); // the server's pool: a connection that dies is not an uncaught error
    const auth = new AuthService(database.db, 0);
    await auth.createUser({ username: 'root', isAdmin: true });
    adminKey = (await auth.createKey({ username: 'root' })).key;
    const owner = await auth.createUser({ username: 'alice' });
    const created = await auth.createKey({ username: 'alice' });
    user = { entity: owner.entity, key: created.key, keyId: created.record.id };
    workerKey = (await auth.createKey({ username: 'alice', kind: 'worker' })).key;

    engine = await startFakeEngine({ models: ['fake/base-model'] });
    const env = {
      DATABASE_URL: databaseUrl(databaseName),
      DATABASE_POOL_SIZE: '4',
      AUTH_CACHE_TTL_MS: String(AUTH_CACHE_TTL_MS),
      LEASE_SWEEP_INTERVAL_MS: String(SWEEP_MS),
      WORKER_LEASE_SECONDS: '30',
      JOB_MAX_ATTEMPTS: '5',
      USAGE_FLUSH_INTERVAL_MS: '50',
      BACKENDS_FILE: writeBackendsFile([backendEntry('fake', [engine.url])]),
    };
    servers = await Promise.all(Array.from({ length: PROCESSES }, () => startServer(env)));
  }, 120_000);

  afterAll(async () => {
    for (const server of servers) server.child.kill('SIGKILL');
    await Promise.all(servers.map((s) => s.exited));
    await sql?.end();
    await database?.close();
    await engine?.close();
    const admin = adminPool();
    await admin.query(`drop database if exists ${databaseName} with (force)`);
    await admin.end();
    for (const dir of dataDirs) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('each queued job is claimed exactly once by workers calling all processes at once', async () => {
    const jobs = await queueJobs(6);
    const claimed = await claimAll(4); // 12 claims for 6 jobs
    expect(claimed.sort()).toEqual([...jobs].sort());
    const { rows } = await sql.query(`select id, status, attempt from training_jobs where id = any($1) order by id`, [jobs]);
    expect(rows).toEqual([...jobs].sort().map((id) => ({ id, status: 'RUNNING', attempt: 1 })));
  });

  it('sweepers running in every process requeue an abandoned job once', async () => {
    const jobs = await queueJobs(4);
    expect((await claimAll(2)).sort()).toEqual([...jobs].sort());
    // The workers vanish: their leases lapse. Three sweepers (every 100 ms) race for the same rows.
    await sql.query(`update training_jobs set lease_expires_at = now() - interval '1 second' where id = any($1)`, [jobs]);
    for (let i = 0; ; i++) {
      const { rows } = await sql.query(`select count(*)::int as n from training_jobs where id = any($1) and status = 'QUEUED'`, [jobs]);
      if (rows[0].n === jobs.length) break;
      if (i > 300) throw new Error('the abandoned jobs were never requeued');
      await sleep(SWEEP_MS);
    }
    await sleep(SWEEP_MS * 10); // many more sweeps in every process
    const { rows } = await sql.query(`select id, status, attempt, lease_token from training_jobs where id = any($1) order by id`, [jobs]);
    expect(rows).toEqual([...jobs].sort().map((id) => ({ id, status: 'QUEUED', attempt: 2, lease_token: null })));
    // Claimed again, each goes to exactly one worker, as attempt 2.
    const again = await claimAll(2);
    expect(again.sort()).toEqual([...jobs].sort());
  });

  it(`a revoked key stops working on every process within AUTH_CACHE_TTL_MS (${AUTH_CACHE_TTL_MS} ms)`, async () => {
    for (const server of servers) expect((await call(server, user.key, 'GET', '/v1/preview/models')).status).toBe(200); // cached everywhere
    const revoked = await call(servers[0], adminKey, 'POST', `/v1/admin/keys/${user.keyId}/revoke`);
    expect(revoked.status, revoked.text).toBe(200);
    await sleep(AUTH_CACHE_TTL_MS + 50);
    for (const server of servers) {
      const reply = await call(server, user.key, 'GET', '/v1/preview/models');
      expect(reply.status, reply.text).toBe(401);
    }
    // A new key of the same user works on every process at once (nothing negative was cached).
    const fresh = await call(servers[1], adminKey, 'POST', '/v1/admin/keys', { username: 'alice' });
    expect(fresh.status, fresh.text).toBe(201);
    user = { ...user, key: fresh.body.key, keyId: fresh.body.id };
    for (const server of servers) expect((await call(server, user.key, 'GET', '/v1/preview/models')).status).toBe(200);
  });

  it('usage of requests spread over the processes is counted exactly once', async () => {
    const requestIds = Array.from({ length: 12 }, (_, i) => `multi-${i}-${randomUUID()}`);
    const tokens = await Promise.all(
      requestIds.map(async (requestId, i) => {
        const stream = i % 2 === 1;
        const response = await fetch(`${servers[i % servers.length].url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${user.key}`, 'content-type': 'application/json', 'x-request-id': requestId },
          body: JSON.stringify({ model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi' }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
        });
        expect(response.status).toBe(200);
        const text = await response.text();
        const usage = stream
          ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data: {') && l.includes('"usage":{')).at(-1)!.slice(6)).usage
          : JSON.parse(text).usage;
        return usage.total_tokens as number;
      }),
    );
    const ours = async () =>
      (await sql.query(`select request_id, prompt_tokens + completion_tokens as total from usage_records where request_id = any($1)`, [requestIds])).rows;
    for (let i = 0; (await ours()).length < requestIds.length; i++) {
      if (i > 200) throw new Error('usage rows were never written');
      await sleep(50);
    }
    await sleep(300); // several more flushes in every process
    const rows = await ours();
    expect(rows.map((r) => r.request_id).sort()).toEqual([...requestIds].sort());
    const total = tokens.reduce((a, b) => a + b, 0);
    // Each process's report reads the same rows: every request once.
    for (const server of servers) {
      const report = await call(server, user.key, 'GET', '/v1/usage');
      expect(report.status, report.text).toBe(200);
      expect(report.body.data).toEqual([expect.objectContaining({ requests: requestIds.length, errors: 0, total_tokens: total })]);
    }
  });
});
