import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkerClient } from '../../src/worker/client.js';
import type { JobOutcome } from '../../src/worker/job-run.js';
import { Worker, type WorkerSettings } from '../../src/worker/worker.js';
import { TRAINER_COMMAND, waitFor } from './harness.js';

/**
 * A heartbeat that never gets an answer (lost on the way, a server process gone without closing its
 * connections) must not hold the lease's renewal back until the lease has expired; and a worker whose
 * heartbeats get no answer while the whole lease lasts stops its trainer, since the job is swept into a retry.
 */

const LEASE_MS = 6_000;

/**
 * A fake server that leases one job and never answers the first heartbeat; like the real one, it answers a
 * heartbeat that comes after the lease expired with 409. `hangAll`: no heartbeat is ever answered.
 */
function fakeServer(options: { hangAll?: boolean } = {}) {
  const jobId = randomUUID();
  let claimed = false;
  let leaseExpires = 0;
  const heartbeats: { status: number | 'no answer'; late: boolean }[] = [];
  const reports: string[] = [];
  const server = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const send = (status: number, body?: unknown) => {
        response.writeHead(status, { 'content-type': 'application/json' });
        response.end(body === undefined ? '' : JSON.stringify(body));
      };
      const url = request.url ?? '';
      if (url === '/v1/workers/claim') {
        if (claimed) return setTimeout(() => send(204), 500);
        claimed = true;
        leaseExpires = Date.now() + LEASE_MS;
        return send(200, {
          job: {
            id: jobId,
            kind: 'rl',
            attempt: 1,
            model: { id: randomUUID(), entity: 'e', project: 'p', name: 'n', base_model: 'b' },
            base_checkpoint: null,
            target_step: 1,
            config: { experimental_config: {} },
            num_inputs: 0,
            inputs_url: `/v1/workers/jobs/${jobId}/inputs`,
          },
          lease: { token: randomUUID(), expires_at: new Date(leaseExpires).toISOString() },
        });
      }
      if (url.endsWith('/inputs')) return send(200);
      if (url.endsWith('/heartbeat')) {
        const late = Date.now() > leaseExpires;
        if (options.hangAll || heartbeats.length === 0) return heartbeats.push({ status: 'no answer', late });
        heartbeats.push({ status: late ? 409 : 200, late });
        if (late) return send(409, { detail: 'stale lease' });
        leaseExpires = Date.now() + LEASE_MS;
        return send(200, { expires_at: new Date(leaseExpires).toISOString(), cancel_requested: false });
      }
      if (url.endsWith('/complete') || url.endsWith('/fail')) reports.push(url);
      return send(200, {});
    });
  });
  return { server, heartbeats, reports };
}

function workerSettings(serverUrl: string, dir: string, trainerEnv: Record<string, string>): WorkerSettings {
  return {
    serverUrl,
    key: 'ty_test',
    command: TRAINER_COMMAND,
    kinds: undefined,
    baseModels: undefined,
    concurrency: 1,
    workDir: path.join(dir, 'work'),
    outputDir: path.join(dir, 'adapters'),
    releaseMs: 0,
    workerId: 'heartbeat-test',
    cancelGraceMs: 2_000,
    drainMs: 1_000,
    heartbeatMs: undefined,
    eventWindowMs: 50,
    pollSeconds: 1,
    trainerEnv: { PATH: process.env.PATH, TRAINER_FIXTURE_MODE: 'hang', ...trainerEnv },
    resident: false,
  };
}

let fake: ReturnType<typeof fakeServer>;
let baseUrl: string;

beforeAll(async () => {
  fake = fakeServer();
  await new Promise<void>((resolve) => fake.server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(fake.server.address() as { port: number }).port}`;
});
afterAll(() => {
  fake.server.closeAllConnections();
  fake.server.close();
});

describe('a heartbeat that gets no answer', () => {
  it('is given up after about a heartbeat interval and tried again while the lease still holds', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-heartbeat-'));
    const outcomes = new Map<string, JobOutcome>();
    const worker = new Worker(
      workerSettings(baseUrl, dir, {}),
      pino({ level: 'silent' }),
      (jobId, outcome) => outcomes.set(jobId, outcome),
    );
    const done = worker.run();
    try {
      // The first heartbeat goes a third of the lease in; the next must renew it before it expires.
      await waitFor(() => fake.heartbeats.length >= 2, 2 * LEASE_MS, () => `heartbeats: ${JSON.stringify(fake.heartbeats)}`);
      expect(fake.heartbeats.slice(0, 2)).toEqual([
        { status: 'no answer', late: false },
        { status: 200, late: false },
      ]);
    } finally {
      worker.stopNow();
      await done;
    }
    // Still the worker's job when it stopped: handed back as interrupted, not lost.
    expect([...outcomes.values()]).toEqual([{ status: 'interrupted' }]);
  }, 30_000);

  it('stops the trainer once the lease lapses without renewal, and reports nothing', async () => {
    const unreachable = fakeServer({ hangAll: true });
    await new Promise<void>((resolve) => unreachable.server.listen(0, '127.0.0.1', resolve));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-lapse-'));
    const runs = path.join(dir, 'runs.log');
    const outcomes: JobOutcome[] = [];
    const worker = new Worker(
      workerSettings(`http://127.0.0.1:${(unreachable.server.address() as { port: number }).port}`, dir, { TRAINER_FIXTURE_LOG: runs }),
      pino({ level: 'silent' }),
      (_jobId, outcome) => outcomes.push(outcome),
    );
    const done = worker.run();
    try {
      await waitFor(() => outcomes.length > 0, 3 * LEASE_MS, () => `heartbeats: ${JSON.stringify(unreachable.heartbeats)}`);
      expect(outcomes).toEqual([{ status: 'unreported', reason: 'lease lost' }]);
      // The hanging trainer got its SIGTERM: the retry the server sweeps the job into trains alone.
      const pid = Number(fs.readFileSync(runs, 'utf8').trim().split(' ')[2]);
      expect(() => process.kill(pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
      expect(unreachable.heartbeats.every((beat) => beat.status === 'no answer')).toBe(true);
      expect(unreachable.reports).toEqual([]);
    } finally {
      worker.stopNow();
      await done;
      unreachable.server.closeAllConnections();
      unreachable.server.close();
    }
  }, 30_000);

  it('is retried no longer than the lease lasts', async () => {
    const hung = fakeServer({ hangAll: true });
    await new Promise<void>((resolve) => hung.server.listen(0, '127.0.0.1', resolve));
    const client = new WorkerClient({ serverUrl: `http://127.0.0.1:${(hung.server.address() as { port: number }).port}`, key: 'ty_test', logger: { warn: () => {}, debug: () => {} } });
    try {
      const started = Date.now();
      await expect(client.heartbeat(randomUUID(), randomUUID(), { timeoutMs: 300, retryForMs: 1_500 })).rejects.toThrow(/gave up/);
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(hung.heartbeats.length).toBeGreaterThanOrEqual(2);
    } finally {
      await client.close().catch(() => {});
      hung.server.closeAllConnections();
      hung.server.close();
    }
  });
});
