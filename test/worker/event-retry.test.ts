import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, listEvents, SERVER_ENV, startWorker, waitForStatus } from './harness.js';

/**
 * The server stores a batch of events and the response is lost on the way back (a connection cut after
 * the commit): the worker retries the post, and the job's events must not hold the batch twice.
 */

let app: App;
let baseUrl: string;
/** Events posts whose response is cut once each, by job id: the first that carries only gradient steps. */
const cut = new Set<string>();

beforeAll(async () => {
  app = await createTestApp(SERVER_ENV, (app) => {
    app.addHook('onSend', async (request, reply, payload) => {
      const match = /^\/v1\/workers\/jobs\/([^/]+)\/events$/.exec(request.url);
      const body = request.body as { events?: { type: string }[] } | undefined;
      if (match && reply.statusCode === 200 && !cut.has(match[1]) && body?.events?.every((event) => event.type === 'gradient_step')) {
        cut.add(match[1]);
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

describe('events posted again after a lost response', () => {
  it('are stored once', async () => {
    const tenant = await createTenant(app);
    // Steps 300 ms apart: each goes in a batch of its own (event window 50 ms).
    const { jobId } = await createJob(app, tenant, { fixture_step_ms: 300 }, 3);
    const { worker, done } = startWorker(baseUrl, tenant);
    try {
      expect(await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED'])).toMatchObject({ status: 'COMPLETED' });
      expect(cut.has(jobId)).toBe(true);
      const events = await listEvents(app, tenant, jobId);
      expect(events.map((event) => [event.type, event.data])).toEqual([
        ['training_started', { num_sequences: 3 }],
        ['gradient_step', { loss: 1, grad_norm: 0.5, step: 1 }],
        ['gradient_step', { loss: 1 / 2, grad_norm: 0.5, step: 2 }],
        ['gradient_step', { loss: 1 / 3, grad_norm: 0.5, step: 3 }],
        ['training_ended', { step: 1, checkpoint_id: expect.any(String) }],
      ]);
    } finally {
      worker.drain();
      await done;
    }
  });
});
