import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, fixtureRuns, SERVER_ENV, startWorker, waitForStatus } from './harness.js';

/**
 * The server leases a job to a claim and the answer is lost on the way back (a proxy timeout during the
 * long poll, a connection reset after the commit): the worker's retry of that claim must get the same job,
 * not leave it leased to no one until the lease runs out and its attempt is spent.
 */

let app: App;
let baseUrl: string;
/** How the next claim answer that leases a job is lost: before its headers, or after part of its body. */
let cut: 'before headers' | 'mid-body' | undefined;
let cutClaims = 0;

beforeAll(async () => {
  // A lease far longer than the wait below: a job stranded by the lost answer would still be RUNNING.
  app = await createTestApp({ ...SERVER_ENV, WORKER_LEASE_SECONDS: '120' }, (app) => {
    app.addHook('onSend', async (request, reply, payload) => {
      if (request.url === '/v1/workers/claim' && reply.statusCode === 200 && cut) {
        if (cut === 'mid-body') {
          const body = String(payload);
          reply.raw.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
          reply.raw.write(body.slice(0, 20));
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        cut = undefined;
        cutClaims++;
        request.raw.socket.destroy();
      }
      return payload;
    });
  });
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
});

describe('a claim whose answer was lost', () => {
  it.each(['before headers', 'mid-body'] as const)('(%s) is retried with its claim_id and gets the job it leased: one attempt, one trainer run', async (how) => {
    cut = how;
    const before = cutClaims;
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant);
    const { worker, done } = startWorker(baseUrl, tenant);
    try {
      expect(await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED'])).toMatchObject({ status: 'COMPLETED', attempt: 1 });
      expect(cutClaims).toBe(before + 1);
      expect(fixtureRuns(tenant).map((run) => [run.jobId, run.attempt])).toEqual([[jobId, 1]]);
    } finally {
      worker.drain();
      await done;
    }
  });
});
