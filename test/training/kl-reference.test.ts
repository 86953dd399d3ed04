import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { call, checkpointSteps, groupGenerationA, modelWithWorker, ScriptedWorker, userWithModel, type ClaimedJob, type ModelWithWorker } from './fixtures.js';

/**
 * The checkpoint an RL job's KL penalty compares against (experimental_config.kl_penalty_reference_step or
 * kl_penalty_step_lag): resolved by the server, handed to the worker by its own URI, and kept while a job
 * needs it.
 */

let app: App;

beforeAll(async () => {
  app = await createTestApp({ CHECKPOINT_EXPIRY_INTERVAL_MS: '86400000' });
});
afterAll(async () => {
  await app.close();
});

type Trained = ModelWithWorker;

async function modelWithSteps(steps: number): Promise<Trained> {
  const t = await modelWithWorker(app);
  for (let i = 0; i < steps; i++) {
    await queue(t);
    const done = await t.worker.complete((await t.worker.claim(5))!);
    expect(done.status, done.text).toBe(200);
  }
  return t;
}

async function queue(t: Trained, experimentalConfig?: Record<string, unknown>) {
  return call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', {
    model_id: t.model.id,
    trajectory_groups: [groupGenerationA()],
    ...(experimentalConfig === undefined ? {} : { experimental_config: experimentalConfig }),
  });
}

async function checkpoint(t: Trained, step: number): Promise<{ id: string; step: number; uri: string }> {
  const page = await call(app, t.user.headers, 'GET', `${t.base}/checkpoints/lifecycle?limit=100`);
  const found = page.body.data.find((c: { step: number }) => c.step === step);
  const row = await app.db.selectFrom('checkpoints').select('uri').where('id', '=', found.id).executeTakeFirstOrThrow();
  return { id: found.id, step, uri: row.uri };
}

const steps = (t: Trained) => checkpointSteps(app, t);

const deleteSteps = (t: Trained, list: number[]) => call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: list });

describe('kl_penalty_reference_step', () => {
  it('naming a step the model has no checkpoint of is a 422 naming the field and the step, and queues nothing', async () => {
    const t = await modelWithSteps(2);
    await deleteSteps(t, [1]);
    const before = await databaseFingerprint(app);
    for (const step of [1, 5]) {
      const reply = await queue(t, { kl_penalty_coef: 0.1, kl_penalty_reference_step: step });
      expect(reply).toMatchObject({ status: 422 });
      expect(reply.body).toEqual({
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'experimental_config', 'kl_penalty_reference_step'],
            msg: `Value error, model ${t.model.id} has no checkpoint of step ${step} to be the KL reference (deleted, or not trained yet)`,
            input: step,
          },
        ],
      });
    }
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('is not checked when the trainer would not read it: step 0 (the base model), or KL off', async () => {
    const t = await modelWithSteps(1);
    for (const config of [{ kl_penalty_coef: 0.1, kl_penalty_reference_step: 0 }, { kl_penalty_coef: 0, kl_penalty_reference_step: 5 }, { kl_penalty_reference_step: 5 }]) {
      const reply = await queue(t, config);
      expect(reply.status, reply.text).toBe(200);
      const claimed = (await t.worker.claim(5))!;
      expect(claimed.job.kl_reference_checkpoint).toBeNull();
      expect((await t.worker.complete(claimed)).status).toBe(200);
    }
  });

  it('is handed to the worker as that checkpoint with its own URI', async () => {
    const t = await modelWithSteps(3);
    expect((await queue(t, { kl_penalty_coef: 0.1, kl_penalty_reference_step: 2 })).status).toBe(200);
    const claimed = (await t.worker.claim(5))!;
    expect(claimed.job.base_checkpoint?.step).toBe(3);
    expect(claimed.job.kl_reference_checkpoint).toEqual(await checkpoint(t, 2));
  });

  it('is kept from Delete Model Checkpoints and retention while its job is queued or running, and not after', async () => {
    const t = await modelWithSteps(3);
    expect((await queue(t, { kl_penalty_coef: 0.1, kl_penalty_reference_step: 1 })).status).toBe(200);
    expect((await deleteSteps(t, [1, 2])).body).toEqual({ deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [1] });
    expect((await call(app, t.user.headers, 'PUT', `${t.base}/retention`, { keep_latest: 1 })).status).toBe(200);
    expect((await call(app, t.user.headers, 'POST', `${t.base}/retention/apply`)).body).toEqual({ deleted_steps: [], expired_steps: [] });
    expect(await steps(t)).toEqual([1, 3]);

    const claimed = (await t.worker.claim(5))!;
    expect(claimed.job.kl_reference_checkpoint?.step).toBe(1);
    expect((await deleteSteps(t, [1])).body).toEqual({ deleted_count: 0, not_found_steps: [], pinned_steps: [], in_use_steps: [1] });
    // Landing step 4 applies retention: step 1 goes with the job that needed it, step 3 as no longer latest.
    expect((await t.worker.complete(claimed)).status).toBe(200);
    expect(await steps(t)).toEqual([4]);
  });
});

describe('kl_penalty_step_lag', () => {
  it('is counted back from the base step the claim fixes, and handed to the worker as that checkpoint', async () => {
    const t = await modelWithSteps(1);
    // Queued behind another job: the base step is only known at the claim.
    expect((await queue(t)).status).toBe(200);
    expect((await queue(t, { kl_penalty_coef: 0.1, kl_penalty_step_lag: 1 })).status).toBe(200);
    const first = (await t.worker.claim(5))!;
    expect(first.job.kl_reference_checkpoint).toBeNull();
    expect((await t.worker.complete(first)).status).toBe(200);
    const lagged = (await t.worker.claim(5))!;
    expect(lagged.job.base_checkpoint?.step).toBe(2);
    expect(lagged.job.kl_reference_checkpoint).toEqual(await checkpoint(t, 1));
  });

  it('reaching back to step 0 or before is the base model', async () => {
    const t = await modelWithSteps(2);
    expect((await queue(t, { kl_penalty_coef: 0.1, kl_penalty_step_lag: 5 })).status).toBe(200);
    expect((await t.worker.claim(5))!.job.kl_reference_checkpoint).toBeNull();
  });

  it('keeps the reference of a running job from Delete Model Checkpoints', async () => {
    const t = await modelWithSteps(3);
    expect((await queue(t, { kl_penalty_coef: 0.1, kl_penalty_step_lag: 2 })).status).toBe(200);
    const claimed = (await t.worker.claim(5))!;
    expect(claimed.job.kl_reference_checkpoint?.step).toBe(1);
    expect((await deleteSteps(t, [1, 2])).body).toEqual({ deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [1] });
  });

  it('fails the job at its claim when the reference was deleted before, naming the setting and the step, and the claim takes the next job', async () => {
    const t = await modelWithSteps(2);
    // ART's usual loop: train, then model.delete_checkpoints() keeps only the latest (or best).
    expect((await deleteSteps(t, [1])).body).toMatchObject({ deleted_count: 1 });
    const lagged = await queue(t, { kl_penalty_coef: 0.1, kl_penalty_step_lag: 1 });
    const other = await userWithModel(app, t.user);
    const otherJob = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: other.model.id, trajectory_groups: [groupGenerationA()] });
    const worker = new ScriptedWorker(app, t.worker.headers, [...t.worker.baseModels, other.baseModel]);

    const claimed: ClaimedJob | undefined = await worker.claim(0);
    expect(claimed?.job.id).toBe(otherJob.body.id);
    const message =
      "experimental_config.kl_penalty_step_lag: the model has no checkpoint of step 1 (this job's base step 2 - 1) to be the KL reference; it was deleted before the job started";
    const job = await call(app, t.user.headers, 'GET', `/v1/preview/training-jobs/${lagged.body.id}`);
    expect(job.body).toMatchObject({ status: 'FAILED', error_message: message });
    const events = await call(app, t.user.headers, 'GET', `/v1/preview/training-jobs/${lagged.body.id}/events`);
    expect(events.body.data.map((e: { type: string; data: unknown }) => [e.type, e.data])).toEqual([['training_failed', { error_message: message }]]);
  });
});
