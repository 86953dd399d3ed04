import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import {
  createJob,
  createTenant,
  fixtureRuns,
  getJob,
  isAlive,
  listCheckpoints,
  SERVER_ENV,
  startCliWorker,
  startWorker,
  waitFor,
  waitForStatus,
} from './harness.js';

let app: App;
let baseUrl: string;

beforeAll(async () => {
  app = await createTestApp(SERVER_ENV);
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
});

describe('the trainyard-worker CLI', () => {
  it('a worker killed with SIGKILL loses its lease, and a second worker completes the job', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant);
    // The first worker's trainer hangs (the env overrides the job's mode), so the job is mid-run when it dies.
    const first = startCliWorker(baseUrl, tenant, ['--worker-id', 'doomed'], { TRAINER_FIXTURE_MODE: 'hang' });
    try {
      await waitFor(() => fixtureRuns(tenant).length === 1, 20_000, () => first.output());
      expect(await getJob(app, tenant, jobId)).toMatchObject({ status: 'RUNNING', attempt: 1 });
      first.child.kill('SIGKILL');
      await first.exited;

      // The orphaned trainer sees its stdin close and stops; the lease (5 s) lapses and the job is requeued.
      const [orphan] = fixtureRuns(tenant);
      await waitFor(() => !isAlive(orphan.pid), 10_000, () => `orphaned trainer ${orphan.pid} still running`);
      const requeued = await waitForStatus(app, tenant, jobId, ['QUEUED'], 15_000);
      expect(requeued).toMatchObject({ attempt: 2, error_message: expect.stringContaining('lease of worker doomed expired') });

      const second = startWorker(baseUrl, tenant);
      try {
        const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED']);
        expect(job).toMatchObject({ status: 'COMPLETED', attempt: 2 });
        expect((await listCheckpoints(app, tenant, modelId)).map((c) => c.step)).toEqual([1]);
      } finally {
        second.worker.drain();
        await second.done;
      }
    } finally {
      first.child.kill('SIGKILL');
    }
  });

  it('on SIGTERM stops claiming, lets the running job finish, and exits 0', async () => {
    const tenant = await createTenant(app);
    const slow = await createJob(app, tenant, { fixture_step_ms: 400, fixture_steps: 4 });
    const waiting = await createJob(app, tenant);
    const worker = startCliWorker(baseUrl, tenant, ['--drain-seconds', '60']);
    try {
      await waitFor(() => fixtureRuns(tenant).length === 1, 20_000, () => worker.output());
      expect(fixtureRuns(tenant)[0].jobId).toBe(slow.jobId);
      worker.child.kill('SIGTERM');
      expect(await worker.exited).toEqual({ code: 0, signal: null });
      expect(worker.output()).toContain('draining: no new claims');

      expect((await getJob(app, tenant, slow.jobId)).status).toBe('COMPLETED');
      expect((await getJob(app, tenant, waiting.jobId)).status).toBe('QUEUED');
      expect(fixtureRuns(tenant)).toHaveLength(1);
    } finally {
      worker.child.kill('SIGKILL');
    }
  });

  it('on SIGTERM fails a job that outlasts the drain period as retryable, so another worker takes it', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, { fixture_mode: 'hang' });
    const worker = startCliWorker(baseUrl, tenant, ['--drain-seconds', '0.5', '--worker-id', 'leaving']);
    try {
      await waitFor(() => fixtureRuns(tenant).length === 1, 20_000, () => worker.output());
      const [run] = fixtureRuns(tenant);
      worker.child.kill('SIGTERM');
      expect(await worker.exited).toEqual({ code: 0, signal: null });
      expect(isAlive(run.pid)).toBe(false);
      expect(await getJob(app, tenant, jobId)).toMatchObject({
        status: 'QUEUED',
        attempt: 2,
        error_message: 'worker leaving shut down before the job finished',
      });
    } finally {
      worker.child.kill('SIGKILL');
    }
  });

  it('refuses to start when the trainer command does not exist', async () => {
    const tenant = await createTenant(app);
    const worker = startCliWorker(baseUrl, tenant, ['--command', 'no-such-trainer --flag']);
    expect((await worker.exited).code).toBe(2);
    expect(worker.output()).toContain('the trainer command "no-such-trainer" was not found or is not executable');
  });
});
