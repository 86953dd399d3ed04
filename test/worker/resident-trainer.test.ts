import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import type { WorkerSettings } from '../../src/worker/worker.js';
import { createTestApp, createUserWithKey } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import {
  cancelJob,
  createJob,
  createTenant,
  fixtureRuns,
  getJob,
  isAlive,
  listCheckpoints,
  listEvents,
  SERVER_ENV,
  startWorker,
  waitFor,
  waitForStatus,
  type Tenant,
} from './harness.js';

/** The fixture trainer taking the worker's residency offer: it stays up between jobs and reads the next on stdin. */
function startResidentWorker(tenant: Tenant, overrides: Partial<WorkerSettings> = {}, fixtureEnv: Record<string, string> = {}) {
  return startWorker(baseUrl, tenant, {
    trainerEnv: { PATH: process.env.PATH, TRAINER_FIXTURE_LOG: tenant.fixtureLog, TRAINER_FIXTURE_RESIDENT: '1', ...fixtureEnv },
    ...overrides,
  });
}

async function completed(tenant: Tenant, jobId: string) {
  return waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED', 'CANCELED']);
}

let app: App;
let baseUrl: string;

beforeAll(async () => {
  app = await createTestApp(SERVER_ENV);
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
});

describe('a resident trainer', () => {
  it('serves the jobs of several models one after another in one process, each with its own events and checkpoint', async () => {
    const tenant = await createTenant(app);
    const jobs = [await createJob(app, tenant, {}, 1), await createJob(app, tenant, {}, 2), await createJob(app, tenant, {}, 3)];
    const { worker, outcomes, done, settings } = startResidentWorker(tenant);
    try {
      for (const { jobId } of jobs) expect(await completed(tenant, jobId)).toMatchObject({ status: 'COMPLETED', attempt: 1 });
      const runs = fixtureRuns(tenant);
      expect(runs.map((run) => run.jobId)).toEqual(jobs.map((job) => job.jobId));
      expect(new Set(runs.map((run) => run.pid)).size).toBe(1);
      expect(isAlive(runs[0].pid)).toBe(true);
      // The server marks a job COMPLETED before the worker has read the reply that ends its own record of it.
      await waitFor(() => jobs.every(({ jobId }) => outcomes.has(jobId)));
      for (const [n, { modelId, jobId }] of jobs.entries()) {
        expect(outcomes.get(jobId)).toMatchObject({ status: 'completed', step: 1 });
        expect(await listCheckpoints(app, tenant, modelId)).toMatchObject([{ step: 1, metrics: { inputs: n + 1 } }]);
        const events = await listEvents(app, tenant, jobId);
        expect(events.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended']);
        expect(events[0].data).toEqual({ num_sequences: n + 1 });
      }
      // The worker's next claim says what its trainer holds: the base model, and the last job's model.
      const admin = await createUserWithKey(app, { isAdmin: true });
      const holds = [{ base_model: tenant.baseModel, model_id: jobs[2].modelId }];
      let listed: unknown;
      await waitFor(async () => {
        const reply = await app.inject({ method: 'GET', url: '/v1/admin/workers', headers: admin.headers });
        listed = reply.json().data.find((w: { worker_id: string }) => w.worker_id === settings.workerId);
        return isDeepStrictEqual((listed as { resident_trainers?: unknown })?.resident_trainers, holds);
      }, 10_000, () => `the worker is listed as ${JSON.stringify(listed)}`);
      // Drained, the worker closes the idle trainer's stdin and the trainer exits.
      worker.drain();
      await done;
      expect(isAlive(runs[0].pid)).toBe(false);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('fails a job it ends with exit code 3 for good, with this job stderr only, and serves the next', async () => {
    const tenant = await createTenant(app);
    const { worker, done } = startResidentWorker(tenant);
    try {
      const crashing = await createJob(app, tenant, { fixture_mode: 'crash-once' });
      expect(await completed(tenant, crashing.jobId)).toMatchObject({ status: 'COMPLETED', attempt: 2 });
      const bad = await createJob(app, tenant, { fixture_mode: 'permanent' });
      const job = await completed(tenant, bad.jobId);
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1 });
      expect(job.error_message).toBe('trainer command exited with code 3 (permanent failure); stderr tail:\nfixture trainer: bad config, giving up');
      const good = await createJob(app, tenant);
      expect(await completed(tenant, good.jobId)).toMatchObject({ status: 'COMPLETED', attempt: 1 });
      const [crashed, retried, failed, served] = fixtureRuns(tenant);
      expect([crashed.jobId, retried.jobId, failed.jobId, served.jobId]).toEqual([crashing.jobId, crashing.jobId, bad.jobId, good.jobId]);
      // The crash ended its process; the retry started another, which then served both later jobs.
      expect(retried.pid).not.toBe(crashed.pid);
      expect(failed.pid).toBe(retried.pid);
      expect(served.pid).toBe(retried.pid);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('that exits between jobs, just after the next was handed to it, has that job run in a new process', async () => {
    const tenant = await createTenant(app);
    const jobs = [await createJob(app, tenant), await createJob(app, tenant)];
    const { worker, outcomes, done } = startResidentWorker(tenant, {}, { TRAINER_FIXTURE_EXIT_AFTER_JOB_MS: '1500' });
    try {
      for (const { jobId } of jobs) expect(await completed(tenant, jobId)).toMatchObject({ status: 'COMPLETED', attempt: 1 });
      const runs = fixtureRuns(tenant);
      expect(runs.map((run) => run.jobId)).toEqual(jobs.map((job) => job.jobId));
      expect(runs[0].pid).not.toBe(runs[1].pid);
      await waitFor(() => jobs.every(({ jobId }) => outcomes.has(jobId)));
      expect(outcomes.get(jobs[1].jobId)).toMatchObject({ status: 'completed', step: 1 });
    } finally {
      worker.drain();
      await done;
    }
  });

  it('ending a job with another exit code is gone before the slot\'s next job starts', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant);
    const { worker, done } = startResidentWorker(tenant, { cancelGraceMs: 500 }, { TRAINER_FIXTURE_JOB_END_CODE: '1', TRAINER_FIXTURE_LINGER: '1' });
    try {
      // Attempt 1 ends with job_end 1 (retryable), and the process lingers until SIGKILL; attempt 2 runs next.
      await waitFor(() => fixtureRuns(tenant).length === 2, 20_000);
      const [first, second] = fixtureRuns(tenant);
      expect([first.attempt, second.attempt]).toEqual([1, 2]);
      expect(isAlive(first.pid)).toBe(false);
      expect((await completed(tenant, jobId)).status).toBe('FAILED');
    } finally {
      worker.drain();
      await done;
    }
  });

  it('is stopped when its job is canceled, and the next job starts a new process', async () => {
    const tenant = await createTenant(app);
    const { worker, outcomes, done } = startResidentWorker(tenant, { heartbeatMs: 200 });
    try {
      const first = await createJob(app, tenant);
      expect((await completed(tenant, first.jobId)).status).toBe('COMPLETED');
      const hanging = await createJob(app, tenant, { fixture_mode: 'hang' });
      await waitFor(async () => (await listEvents(app, tenant, hanging.jobId)).some((e) => e.type === 'training_started'));
      const [resident] = fixtureRuns(tenant);
      expect(fixtureRuns(tenant)[1].pid).toBe(resident.pid);
      await cancelJob(app, tenant, hanging.jobId);
      expect((await completed(tenant, hanging.jobId)).status).toBe('CANCELED');
      await waitFor(() => outcomes.has(hanging.jobId));
      expect(outcomes.get(hanging.jobId)).toEqual({ status: 'canceled' });
      expect(isAlive(resident.pid)).toBe(false);
      const next = await createJob(app, tenant);
      expect((await completed(tenant, next.jobId)).status).toBe('COMPLETED');
      expect(fixtureRuns(tenant)[2].pid).not.toBe(resident.pid);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('that ignores SIGTERM is killed after the cancel grace period', async () => {
    const tenant = await createTenant(app);
    const { worker, done } = startResidentWorker(tenant, { heartbeatMs: 200, cancelGraceMs: 500 });
    try {
      const first = await createJob(app, tenant);
      expect((await completed(tenant, first.jobId)).status).toBe('COMPLETED');
      const stubborn = await createJob(app, tenant, { fixture_mode: 'stubborn' });
      await waitFor(async () => (await listEvents(app, tenant, stubborn.jobId)).some((e) => e.type === 'training_started'));
      const [resident] = fixtureRuns(tenant);
      await cancelJob(app, tenant, stubborn.jobId);
      expect((await completed(tenant, stubborn.jobId)).status).toBe('CANCELED');
      expect(isAlive(resident.pid)).toBe(false);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('is stopped when the worker drains past its drain period, and the job is handed back as retryable', async () => {
    const tenant = await createTenant(app);
    const { worker, outcomes, done } = startResidentWorker(tenant, { drainMs: 300 });
    const first = await createJob(app, tenant);
    expect((await completed(tenant, first.jobId)).status).toBe('COMPLETED');
    const hanging = await createJob(app, tenant, { fixture_mode: 'hang' });
    await waitFor(() => fixtureRuns(tenant).length === 2);
    const [resident] = fixtureRuns(tenant);
    worker.drain();
    await done;
    expect(outcomes.get(hanging.jobId)).toEqual({ status: 'interrupted' });
    expect(isAlive(resident.pid)).toBe(false);
    expect(await waitForStatus(app, tenant, hanging.jobId, ['QUEUED'])).toMatchObject({ attempt: 2 });
    await cancelJob(app, tenant, hanging.jobId);
  });

  it('is stopped when its lease lapses, and nothing is reported', async () => {
    const tenant = await createTenant(app);
    // Heartbeats slower than the 5 s lease: the server sweeps the second job's lease before the first heartbeat.
    const { worker, outcomes, done } = startResidentWorker(tenant, { heartbeatMs: 7_000, cancelGraceMs: 1_000 });
    const first = await createJob(app, tenant);
    const hanging = { jobId: '' };
    try {
      expect((await completed(tenant, first.jobId)).status).toBe('COMPLETED');
      hanging.jobId = (await createJob(app, tenant, { fixture_mode: 'hang' })).jobId;
      await waitFor(() => outcomes.has(hanging.jobId), 20_000);
      expect(outcomes.get(hanging.jobId)).toEqual({ status: 'unreported', reason: 'lease lost' });
      const [resident, second] = fixtureRuns(tenant);
      expect(second.pid).toBe(resident.pid);
      expect(isAlive(resident.pid)).toBe(false);
      expect((await getJob(app, tenant, hanging.jobId)).attempt).toBe(2);
    } finally {
      worker.drain();
      worker.stopNow();
      await done;
      if (hanging.jobId) await cancelJob(app, tenant, hanging.jobId);
    }
  });

  it('that prints job_end on stdout only still has its jobs completed, after the worker waited for the stderr copy', async () => {
    const tenant = await createTenant(app);
    const jobs = [await createJob(app, tenant), await createJob(app, tenant)];
    const { worker, done } = startResidentWorker(tenant, {}, { TRAINER_FIXTURE_STDOUT_JOB_END: '1' });
    try {
      for (const { jobId } of jobs) expect(await completed(tenant, jobId)).toMatchObject({ status: 'COMPLETED', attempt: 1 });
      const [one, two] = fixtureRuns(tenant);
      expect(two.pid).toBe(one.pid);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('is not offered with --resident off: the same trainer then runs one process per job', async () => {
    const tenant = await createTenant(app);
    const jobs = [await createJob(app, tenant), await createJob(app, tenant)];
    const { worker, done } = startResidentWorker(tenant, { resident: false });
    try {
      for (const { jobId } of jobs) expect((await completed(tenant, jobId)).status).toBe('COMPLETED');
      const [one, two] = fixtureRuns(tenant);
      expect(one.pid).not.toBe(two.pid);
      expect(isAlive(one.pid)).toBe(false);
    } finally {
      worker.drain();
      await done;
    }
  });
});
