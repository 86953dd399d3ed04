import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { findExecutable } from '../../src/worker/command.js';
import { createTestApp } from '../helpers/app.js';
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

describe('the worker runtime against the server', () => {
  it('runs a job with the trainer command and completes it with the checkpoint the trainer reported', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant, {}, 3);
    const { worker, outcomes, done, settings } = startWorker(baseUrl, tenant);
    try {
      const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED']);
      expect(job).toMatchObject({ status: 'COMPLETED', attempt: 1, target_step: 1, error_message: null });
      await waitFor(() => outcomes.has(jobId));
      expect(outcomes.get(jobId)).toMatchObject({ status: 'completed', step: 1 });

      const [checkpoint] = await listCheckpoints(app, tenant, modelId);
      expect(checkpoint).toMatchObject({ step: 1, metrics: { 'train/loss': 1 / 3, inputs: 3 } });
      const events = await listEvents(app, tenant, jobId);
      expect(events.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended']);
      // The trainer counted the inputs the worker streamed into its inputs file.
      expect(events[0].data).toEqual({ num_sequences: 3 });
      expect(events[1].data).toEqual({ loss: 1, grad_norm: 0.5, step: 1 });
      expect(events[4].data).toEqual({ step: 1, checkpoint_id: checkpoint.id });

      // The adapter stays where engines can load it; the spec and inputs are gone.
      const adapterDir = path.join(settings.outputDir, modelId, 'step-1');
      expect(fs.readdirSync(adapterDir).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
      expect(fs.readdirSync(path.join(settings.workDir, 'jobs'))).toEqual([]);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('fails the job for good when the server refuses the checkpoint URI the trainer reported', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant, { fixture_uri: '/etc/trainyard-adapter' });
    const { worker, outcomes, done, settings } = startWorker(baseUrl, tenant);
    try {
      const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED']);
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1 });
      expect(job.error_message).toContain('the server refused the checkpoint /etc/trainyard-adapter: HTTP 422');
      expect(job.error_message).toContain('is not allowed: it must start with one of');
      await waitFor(() => outcomes.has(jobId));
      expect(outcomes.get(jobId)).toMatchObject({ status: 'failed', retryable: false });
      expect(await listCheckpoints(app, tenant, modelId)).toEqual([]);
      expect(fixtureRuns(tenant)).toHaveLength(1);
      // The adapter the trainer wrote is no checkpoint: its directory (and the model's, left empty) is gone.
      expect(fs.readdirSync(settings.outputDir)).toEqual([]);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('fails a crashing trainer as retryable, runs it again, then fails the job with its stderr tail', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, { fixture_mode: 'crash' });
    const { worker, done } = startWorker(baseUrl, tenant);
    try {
      const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED']);
      expect(job.status).toBe('FAILED');
      expect(job.attempt).toBe(2); // JOB_MAX_ATTEMPTS
      expect(job.error_message).toContain('trainer command exited with code 1');
      expect(job.error_message).toContain('RuntimeError: CUDA out of memory (fixture crash)');
      expect(fixtureRuns(tenant).map((run) => [run.jobId, run.attempt])).toEqual([
        [jobId, 1],
        [jobId, 2],
      ]);
      const events = await listEvents(app, tenant, jobId);
      expect(events.filter((e) => e.type === 'training_started')).toHaveLength(2);
      expect(events.at(-1)).toMatchObject({ type: 'training_failed', data: { error_message: job.error_message } });
    } finally {
      worker.drain();
      await done;
    }
  });

  it('completes a job on its second attempt when only the first crashed', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant, { fixture_mode: 'crash-once' });
    const { worker, done } = startWorker(baseUrl, tenant);
    try {
      const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED']);
      expect(job).toMatchObject({ status: 'COMPLETED', attempt: 2 });
      expect((await listCheckpoints(app, tenant, modelId)).map((c) => c.step)).toEqual([1]);
    } finally {
      worker.drain();
      await done;
    }
  });

  it.each([
    ['permanent', 'trainer command exited with code 3 (permanent failure)', 'bad config, giving up'],
    ['no-checkpoint', 'trainer command exited 0 without reporting a checkpoint', undefined],
  ])('fails the job at once, without a retry, when the trainer %s', async (mode, message, stderr) => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, { fixture_mode: mode });
    const { worker, outcomes, done } = startWorker(baseUrl, tenant);
    try {
      const job = await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED']);
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1 });
      expect(job.error_message).toContain(message);
      if (stderr) expect(job.error_message).toContain(stderr);
      await waitFor(() => outcomes.has(jobId));
      expect(outcomes.get(jobId)).toMatchObject({ status: 'failed', retryable: false });
      expect(fixtureRuns(tenant)).toHaveLength(1);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('stops the trainer when the job is canceled and the job ends CANCELED', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant, { fixture_mode: 'hang' });
    const { worker, outcomes, done, settings } = startWorker(baseUrl, tenant, { heartbeatMs: 200 });
    try {
      await waitFor(async () => (await listEvents(app, tenant, jobId)).some((e) => e.type === 'training_started'));
      const [run] = fixtureRuns(tenant);
      expect(isAlive(run.pid)).toBe(true);

      expect(await cancelJob(app, tenant, jobId)).toMatchObject({ status: 'RUNNING', cancel_requested: true });
      const job = await waitForStatus(app, tenant, jobId, ['CANCELED', 'FAILED', 'COMPLETED']);
      expect(job.status).toBe('CANCELED');
      await waitFor(() => outcomes.has(jobId));
      expect(outcomes.get(jobId)).toEqual({ status: 'canceled' });
      expect(isAlive(run.pid)).toBe(false);
      expect(await listCheckpoints(app, tenant, modelId)).toEqual([]);
      expect((await listEvents(app, tenant, jobId)).at(-1)).toMatchObject({ type: 'training_failed' });
      expect(fs.readdirSync(path.join(settings.workDir, 'jobs'))).toEqual([]);
      expect(fs.existsSync(path.join(settings.outputDir, modelId))).toBe(false);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('removes the output of a trainer that finished after a cancel its heartbeats had not yet seen', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant, { fixture_step_ms: 300 });
    // No heartbeat before the trainer ends: the cancel reaches the worker as complete's 409.
    const { worker, outcomes, done, settings } = startWorker(baseUrl, tenant, { heartbeatMs: 4_000 });
    try {
      await waitFor(async () => (await listEvents(app, tenant, jobId)).some((e) => e.type === 'training_started'));
      expect(await cancelJob(app, tenant, jobId)).toMatchObject({ status: 'RUNNING', cancel_requested: true });
      await waitFor(() => outcomes.has(jobId));
      expect(outcomes.get(jobId)).toEqual({ status: 'canceled' });
      expect((await waitForStatus(app, tenant, jobId, ['CANCELED', 'FAILED', 'COMPLETED'])).status).toBe('CANCELED');
      expect(await listCheckpoints(app, tenant, modelId)).toEqual([]);
      expect(fs.existsSync(path.join(settings.outputDir, modelId))).toBe(false);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('kills a trainer that ignores SIGTERM after the cancel grace period', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, { fixture_mode: 'stubborn' });
    const { worker, done } = startWorker(baseUrl, tenant, { heartbeatMs: 200, cancelGraceMs: 500 });
    try {
      await waitFor(async () => (await listEvents(app, tenant, jobId)).some((e) => e.type === 'training_started'));
      const [run] = fixtureRuns(tenant);
      await cancelJob(app, tenant, jobId);
      expect((await waitForStatus(app, tenant, jobId, ['CANCELED', 'FAILED', 'COMPLETED'])).status).toBe('CANCELED');
      expect(isAlive(run.pid)).toBe(false);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('interrupts a running job when the drain period is over and hands it back as retryable', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, { fixture_mode: 'hang' });
    const { worker, outcomes, done } = startWorker(baseUrl, tenant, { drainMs: 300 });
    await waitFor(async () => (await listEvents(app, tenant, jobId)).some((e) => e.type === 'training_started'));
    const [run] = fixtureRuns(tenant);
    worker.drain();
    await done;
    expect(outcomes.get(jobId)).toEqual({ status: 'interrupted' });
    expect(isAlive(run.pid)).toBe(false);
    const job = await waitForStatus(app, tenant, jobId, ['QUEUED']);
    expect(job).toMatchObject({ attempt: 2, error_message: expect.stringContaining('shut down before the job finished') });
    await cancelJob(app, tenant, jobId);
  });

  it('runs as many jobs at once as its concurrency', async () => {
    const tenant = await createTenant(app);
    const first = await createJob(app, tenant, { fixture_mode: 'hang' });
    const second = await createJob(app, tenant, { fixture_mode: 'hang' });
    const { worker, outcomes, done } = startWorker(baseUrl, tenant, { concurrency: 2, heartbeatMs: 200 });
    try {
      await waitFor(() => fixtureRuns(tenant).length === 2);
      expect(fixtureRuns(tenant).map((run) => run.jobId).sort()).toEqual([first.jobId, second.jobId].sort());
      expect(worker.runningJobs).toBe(2);
      await cancelJob(app, tenant, first.jobId);
      await cancelJob(app, tenant, second.jobId);
      await waitFor(() => outcomes.size === 2);
      expect([...outcomes.values()]).toEqual([{ status: 'canceled' }, { status: 'canceled' }]);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('stops the trainer and reports nothing when the server answers 409 for a lease that lapsed', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, { fixture_mode: 'hang' });
    // Heartbeats slower than the 5 s lease: the server sweeps the lease before the first one.
    const { worker, outcomes, done } = startWorker(baseUrl, tenant, { heartbeatMs: 7_000, cancelGraceMs: 1_000 });
    try {
      await waitFor(() => fixtureRuns(tenant).length === 1);
      const [run] = fixtureRuns(tenant);
      await waitFor(() => outcomes.has(jobId), 20_000);
      expect(outcomes.get(jobId)).toEqual({ status: 'unreported', reason: 'lease lost' });
      expect(isAlive(run.pid)).toBe(false);
      // The sweep requeued the job; the worker's silence left it that way (and it may claim it again).
      const job = await getJob(app, tenant, jobId);
      expect(job.attempt).toBe(2);
      expect(job.error_message).toContain('expired');
    } finally {
      worker.drain();
      worker.stopNow();
      await done;
      await cancelJob(app, tenant, jobId);
    }
  });

  it.skipIf(!findExecutable('python3', process.env))('runs the Python trainer of the documented example', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant);
    const { worker, done, settings } = startWorker(baseUrl, tenant, { command: ['python3', path.resolve('examples/trainer/train.py')] });
    try {
      expect((await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED'])).status).toBe('COMPLETED');
      const [checkpoint] = await listCheckpoints(app, tenant, modelId);
      expect(checkpoint).toMatchObject({ step: 1, metrics: { 'train/loss': 1 / 3 } });
      expect((await listEvents(app, tenant, jobId))[0]).toMatchObject({ type: 'training_started', data: { num_sequences: 2 } });
      expect(fs.readdirSync(path.join(settings.outputDir, modelId, 'step-1'))).toEqual(['adapter_config.json']);
    } finally {
      worker.drain();
      await done;
    }
  });

  it('stops claiming when the server refuses its key', async () => {
    const tenant = await createTenant(app);
    const { worker, done } = startWorker(baseUrl, tenant, { key: 'not-a-key' });
    await expect(done).rejects.toThrow(/HTTP 401/);
    expect(worker.runningJobs).toBe(0);
  });
});
