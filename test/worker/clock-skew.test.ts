import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, fixtureRuns, listEvents, SERVER_ENV, startCliWorker, waitForStatus } from './harness.js';

/**
 * A lease's `expires_at` is a time on the server's clock; the worker times the lease on its own monotonic clock
 * instead, so a machine whose clock is set wrong still renews its leases and finishes its jobs.
 */

const SKEWED_CLOCK = pathToFileURL(path.resolve('test/worker/skewed-clock.mjs')).href;

let app: App;
let baseUrl: string;

beforeAll(async () => {
  app = await createTestApp(SERVER_ENV);
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
});

describe('a worker whose clock is 120 s off the server\'s', () => {
  it.each([
    ['ahead of', 120_000],
    ['behind', -120_000],
  ])('with its clock %s the server\'s completes a job that outlasts the lease, and warns of the clocks once', async (direction, offsetMs) => {
    const tenant = await createTenant(app);
    // 7 s of training under a 5 s lease (SERVER_ENV): it takes heartbeats to finish.
    const { jobId } = await createJob(app, tenant, { fixture_step_ms: 1000, fixture_steps: 7 });
    const worker = startCliWorker(baseUrl, tenant, ['--release-seconds', '0'], {
      NODE_OPTIONS: `--import=${SKEWED_CLOCK}`,
      TEST_CLOCK_OFFSET_MS: String(offsetMs),
    });
    try {
      const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED'], 30_000);
      expect(job).toMatchObject({ status: 'COMPLETED', attempt: 1, target_step: 1, error_message: null });
      expect(fixtureRuns(tenant).map((run) => [run.jobId, run.attempt])).toEqual([[jobId, 1]]);
      expect((await listEvents(app, tenant, jobId)).map((event) => event.type)).toEqual([
        'training_started',
        ...Array.from({ length: 7 }, () => 'gradient_step'),
        'training_ended',
      ]);

      const logs = worker.output().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
      expect(logs.filter((line) => line.msg === 'the lease lapsed without renewal; stopping the trainer')).toEqual([]);
      const warnings = logs.filter((line) => line.server_clock_ahead_ms !== undefined);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatchObject({
        level: 40,
        msg:
          `this machine's clock is 120 s ${direction} the server's: leases are timed from the server's answers, so jobs are not affected, ` +
          'but log times differ from the server\'s, and a clock minutes ahead shortens the margin of the checkpoint storage sweep. ' +
          'Synchronize the clocks (NTP).',
      });
      expect(Math.abs(warnings[0].server_clock_ahead_ms + offsetMs)).toBeLessThan(2_000);
    } finally {
      worker.child.kill('SIGTERM');
      await worker.exited;
    }
  }, 60_000);
});
