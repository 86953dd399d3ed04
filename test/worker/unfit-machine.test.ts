import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { UNFIT_MACHINE_EXIT_CODE } from '../../src/worker/job-run.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, fixtureRuns, getJob, isAlive, listEvents, SERVER_ENV, startCliWorker, startWorker, waitFor } from './harness.js';

/**
 * A trainer that exits with code 4 says this machine cannot run it (CUDA missing, say): the job is not at fault,
 * so it goes back to the queue for another worker, and this worker claims nothing more and exits 1.
 */

const REASON = 'fixture trainer: --device cuda was asked for but CUDA is not available';

/** What `promise` settles to, or 'still running' after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'still running'> {
  return Promise.race([promise, sleep(ms).then(() => 'still running' as const)]);
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

describe('a trainer that exits with code 4', () => {
  it('has its job requeued as retryable, and the worker claims nothing more, lets its running job finish and exits 1', async () => {
    expect(UNFIT_MACHINE_EXIT_CODE).toBe(4);
    const tenant = await createTenant(app);
    const running = await createJob(app, tenant, { fixture_step_ms: 300, fixture_steps: 5 });
    const unfit = await createJob(app, tenant, { fixture_mode: 'unfit' });
    const worker = startCliWorker(baseUrl, tenant, ['--concurrency', '2', '--worker-id', 'broken-gpu']);
    try {
      expect(await within(worker.exited, 30_000)).toEqual({ code: 1, signal: null });

      expect(await getJob(app, tenant, running.jobId)).toMatchObject({ status: 'COMPLETED', attempt: 1, error_message: null });
      expect(await getJob(app, tenant, unfit.jobId)).toEqual({
        id: unfit.jobId,
        model_id: unfit.modelId,
        kind: 'rl',
        status: 'QUEUED',
        created_at: expect.any(String),
        training_start: expect.any(String),
        training_end: null,
        error_message: `trainer command exited with code 4 (worker broken-gpu cannot run the trainer); stderr tail:\n${REASON}`,
        attempt: 2,
        // Fixed again at the next claim.
        base_step: null,
        target_step: null,
        cancel_requested: false,
      });
      expect(await listEvents(app, tenant, unfit.jobId)).toEqual([]);
      // Each job ran once: the requeued job was there to claim while the other finished, and was not taken again.
      expect(fixtureRuns(tenant).map((run) => [run.jobId, run.attempt]).sort()).toEqual([[running.jobId, 1], [unfit.jobId, 1]].sort());

      const logs = worker.output().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
      expect(logs.filter((line) => line.level === 50)).toMatchObject([
        {
          job_id: unfit.jobId,
          reason: REASON,
          msg: `the trainer exited with code 4: this machine cannot run it (${REASON}); no more jobs are claimed, and the worker stops once its running jobs are done`,
        },
      ]);
      // The other job was still running when the worker stopped claiming, and it ran to its end.
      const stopped = logs.findIndex((line) => line.level === 50);
      const completed = logs.findIndex((line) => line.msg === 'job completed' && line.job_id === running.jobId);
      expect(stopped).toBeGreaterThanOrEqual(0);
      expect(completed).toBeGreaterThan(stopped);
      expect(logs.filter((line) => line.level === 60)).toMatchObject([
        { msg: 'worker stopped on an error', err: `the trainer cannot run on this machine (it exited with code 4): ${REASON}` },
      ]);
    } finally {
      worker.child.kill('SIGKILL');
    }
  }, 60_000);

  it('as a resident trainer\'s job_end has the job requeued, the trainer stopped, and the worker stopped with the reason', async () => {
    const tenant = await createTenant(app);
    const unfit = await createJob(app, tenant, { fixture_mode: 'unfit' });
    const waiting = await createJob(app, tenant);
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    const { worker, outcomes, done, settings } = startWorker(
      baseUrl,
      tenant,
      { trainerEnv: { PATH: process.env.PATH, TRAINER_FIXTURE_LOG: tenant.fixtureLog, TRAINER_FIXTURE_RESIDENT: '1' } },
      pino({ level: 'info' }, sink),
    );
    try {
      await expect(within(done, 10_000)).rejects.toThrow(`the trainer cannot run on this machine (it exited with code 4): ${REASON}`);
      const message = `trainer command exited with code 4 (worker ${settings.workerId} cannot run the trainer); stderr tail:\n${REASON}`;
      expect(outcomes.get(unfit.jobId)).toEqual({ status: 'failed', retryable: true, message });
      expect(await getJob(app, tenant, unfit.jobId)).toMatchObject({ status: 'QUEUED', attempt: 2, error_message: message });
      expect(await getJob(app, tenant, waiting.jobId)).toMatchObject({ status: 'QUEUED', attempt: 1, error_message: null });

      // The job ended by its job_end line, not by the process exiting; the process was then let go.
      const [run] = fixtureRuns(tenant);
      expect(fixtureRuns(tenant)).toHaveLength(1);
      expect(lines).toContainEqual(expect.objectContaining({ job_id: unfit.jobId, code: 4, msg: 'trainer finished the job; stopping it' }));
      await waitFor(() => !isAlive(run.pid), 5_000, () => `trainer ${run.pid} still running`);
    } finally {
      worker.stopNow();
      await done.catch(() => {});
    }
  }, 30_000);
});
