import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/db/index.js';
import {
  appendWorkerEvents,
  attemptStarted,
  cancelJob,
  claimJob,
  completeJob,
  countJobsByStatus,
  createJob,
  createModel,
  deleteModel,
  failJob,
  findJob,
  findLeasedJob,
  heartbeat,
  jsonb,
  listActiveWorkers,
  listCheckpoints,
  listEvents,
  listJobs,
  readJobInputs,
  reclaimJob,
  sweepExpiredLeases,
  touchWorker,
  type StoredJob,
  type StoredModel,
  type TrainingDb,
} from '../../src/training/repository.js';
import { createEntity, openTrainingDb } from './db.js';

let handle: DatabaseHandle;
let db: TrainingDb;

beforeAll(async () => {
  ({ handle, db } = await openTrainingDb());
});
afterAll(async () => {
  await handle.close();
});

/** Each test trains its own base model and claims only that one, so tests never take each other's jobs. */
async function newModel(baseModel = `base-${crypto.randomUUID()}`): Promise<StoredModel> {
  const entityId = await createEntity(db);
  return (await createModel(db, { entityId, project: 'proj', name: `m-${crypto.randomUUID().slice(0, 8)}`, baseModel }))!;
}

function newJob(model: StoredModel, overrides: Partial<{ kind: 'rl' | 'sft'; inputs: unknown[]; maxAttempts: number }> = {}): Promise<StoredJob> {
  return db.transaction().execute((trx) =>
    createJob(trx, {
      model,
      kind: overrides.kind ?? 'rl',
      config: { learning_rate: 5e-6 },
      inputsJson: (overrides.inputs ?? [{ trajectories: [{ reward: 1 }] }]).map((input) => JSON.stringify(input)),
      maxAttempts: overrides.maxAttempts ?? 3,
    }),
  );
}

const claim = (model: StoredModel, extra: { kinds?: ('rl' | 'sft')[] } = {}) =>
  claimJob(db, { reach: 'all', workerId: 'w1', baseModels: [model.base_model], leaseSeconds: 60, ...extra });

const complete = (jobId: string, leaseToken: string, metrics: Record<string, number> = {}) =>
  db.transaction().execute((trx) => completeJob(trx, { jobId, leaseToken, uri: `s3://ckpt/${jobId}`, metrics }));

const fail = (jobId: string, leaseToken: string, retryable: boolean) =>
  db.transaction().execute((trx) => failJob(trx, { jobId, leaseToken, errorMessage: 'CUDA out of memory', retryable }));

async function expireLease(jobId: string): Promise<void> {
  await db.updateTable('training_jobs').set({ lease_expires_at: sql<Date>`now() - interval '1 second'` }).where('id', '=', jobId).execute();
}

async function eventTypes(job: StoredJob): Promise<string[]> {
  return (await listEvents(db, { job, limit: 100 })).data.map((e) => e.type);
}

describe('creating jobs', () => {
  it('queues a job and stores its inputs in order for the JSON Lines stream', async () => {
    const model = await newModel();
    const inputs = Array.from({ length: 1200 }, (_, i) => ({ trajectories: [{ reward: i, messages_and_choices: [] }] }));
    const job = await newJob(model, { inputs });
    expect(job).toMatchObject({ status: 'QUEUED', attempt: 1, num_inputs: 1200, base_step: null, target_step: null, training_start: null });
    const first = await readJobInputs(db, { jobId: job.id, afterSeq: -1, limit: 1000 });
    const rest = await readJobInputs(db, { jobId: job.id, afterSeq: first[first.length - 1].seq, limit: 1000 });
    const all = [...first, ...rest].map((row) => JSON.parse(row.json));
    expect(all).toEqual(inputs);
  });

  it('finds and lists jobs only within the caller`s entities, newest first', async () => {
    const model = await newModel();
    const a = await newJob(model);
    const b = await newJob(model);
    expect(await findJob(db, { entityIds: [model.entity_id], jobId: a.id })).toEqual(a);
    expect(await findJob(db, { entityIds: [await createEntity(db)], jobId: a.id })).toBeUndefined();
    const page = (await listJobs(db, { entityIds: [model.entity_id], modelId: model.id, limit: 1 }))!;
    expect(page.data.map((j) => j.id)).toEqual([b.id]);
    const next = (await listJobs(db, { entityIds: [model.entity_id], modelId: model.id, after: page.last_id, limit: 1 }))!;
    expect(next.data.map((j) => j.id)).toEqual([a.id]);
    expect(next.has_more).toBe(false);
  });
});

describe('claiming', () => {
  it('returns nothing when no job is queued', async () => {
    expect(await claim(await newModel())).toBeUndefined();
  });

  it('starts the oldest queued job with a lease and target step 1 for a model without checkpoints', async () => {
    const model = await newModel();
    const job = await newJob(model);
    const claimed = (await claim(model))!;
    expect(claimed.job).toMatchObject({ id: job.id, status: 'RUNNING', base_step: 0, target_step: 1, worker_id: 'w1' });
    expect(claimed.job.training_start).not.toBeNull();
    expect(claimed.base_checkpoint).toBeUndefined();
    expect(claimed.model).toMatchObject({ id: model.id, entity: expect.any(String), base_model: model.base_model });
    expect(new Date(claimed.job.lease_expires_at!).getTime()).toBeGreaterThan(Date.now() + 50_000);
  });

  it('runs one job per model at a time, in creation order, while other models proceed', async () => {
    const base = `base-${crypto.randomUUID()}`;
    const a = await newModel(base);
    const b = await newModel(base);
    const a1 = await newJob(a);
    const a2 = await newJob(a);
    const b1 = await newJob(b);
    expect((await claim(a))!.job.id).toBe(a1.id);
    expect((await claim(a))!.job.id).toBe(b1.id);
    expect(await claim(a)).toBeUndefined();
    expect(a2.status).toBe('QUEUED');
  });

  it('targets the step after the latest checkpoint and hands over that checkpoint', async () => {
    const model = await newModel();
    await db.insertInto('checkpoints').values([3, 5].map((step) => ({ id: crypto.randomUUID(), model_id: model.id, step, uri: `s3://${step}`, metrics: jsonb({}), job_id: null }))).execute();
    await newJob(model);
    const claimed = (await claim(model))!;
    expect(claimed.job).toMatchObject({ base_step: 5, target_step: 6 });
    expect(claimed.base_checkpoint).toMatchObject({ step: 5, uri: 's3://5' });
  });

  it('a retried claim_id that missed its first claim in flight gets that claim\'s job under the claim lock, not a second one', async () => {
    const base = `base-${crypto.randomUUID()}`;
    const first = await newJob(await newModel(base));
    const second = await newJob(await newModel(base));
    const args = { reach: 'all' as const, workerId: 'w1', baseModels: [base], claimId: crypto.randomUUID(), leaseSeconds: 60 };
    // The retry looks for its claim while the first claim's transaction is still open: nothing yet.
    expect(await reclaimJob(db, args)).toBeUndefined();
    const taken = (await db.transaction().execute((trx) => claimJob(trx, args)))!;
    expect(taken.job.id).toBe(first.id);
    // The retry goes on to claim under the lock, where the first claim has committed.
    const retried = (await db.transaction().execute((trx) => claimJob(trx, args)))!;
    expect(retried).toMatchObject({ job: { id: first.id }, lease_token: taken.lease_token });
    expect((await db.selectFrom('training_jobs').select('status').where('id', '=', second.id).executeTakeFirstOrThrow()).status).toBe('QUEUED');
  });

  it('claims only the kinds the worker asks for', async () => {
    const model = await newModel();
    await newJob(model, { kind: 'sft' });
    expect(await claim(model, { kinds: ['rl'] })).toBeUndefined();
    expect((await claim(model, { kinds: ['sft'] }))!.job.kind).toBe('sft');
  });
});

describe('leases', () => {
  it('renews a lease and refuses a wrong token', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    expect(await heartbeat(db, { jobId: job.id, leaseToken: lease_token, leaseSeconds: 120 })).toEqual({ expires_at: expect.any(String), cancel_requested: false });
    expect(await heartbeat(db, { jobId: job.id, leaseToken: crypto.randomUUID(), leaseSeconds: 120 })).toBeUndefined();
    expect(await heartbeat(db, { jobId: job.id, leaseToken: 'nonsense', leaseSeconds: 120 })).toBeUndefined();
  });

  it('requeues a job whose lease lapsed, and the old token can change nothing', async () => {
    const model = await newModel();
    await newJob(model);
    const first = (await claim(model))!;
    await expireLease(first.job.id);
    const swept = await db.transaction().execute((trx) => sweepExpiredLeases(trx, { limit: 100 }));
    expect(swept.find((j) => j.id === first.job.id)).toMatchObject({ status: 'QUEUED', attempt: 2 });
    expect(await heartbeat(db, { jobId: first.job.id, leaseToken: first.lease_token, leaseSeconds: 60 })).toBeUndefined();
    expect(await complete(first.job.id, first.lease_token)).toEqual({ outcome: 'stale' });
    const second = (await claim(model))!;
    expect(second.job).toMatchObject({ id: first.job.id, attempt: 2, status: 'RUNNING' });
    expect(second.lease_token).not.toBe(first.lease_token);
  });

  it('fails a job whose lease lapsed on its last attempt', async () => {
    const model = await newModel();
    await newJob(model, { maxAttempts: 1 });
    const { job } = (await claim(model))!;
    await expireLease(job.id);
    const swept = await db.transaction().execute((trx) => sweepExpiredLeases(trx, { limit: 100 }));
    expect(swept.find((j) => j.id === job.id)).toMatchObject({ status: 'FAILED', error_message: 'lease of worker w1 expired' });
    expect(await eventTypes(job)).toEqual(['training_failed']);
  });
});

describe('events', () => {
  it('pages events in append order, strictly after the cursor, from the beginning for an unknown one', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    const leased = (await db.transaction().execute((trx) => findLeasedJob(trx, { jobId: job.id, leaseToken: lease_token })))!;
    expect(await attemptStarted(db, { job: leased })).toBe(false);
    const posted = [
      { type: 'training_started' as const, data: { num_sequences: 44 } },
      ...Array.from({ length: 44 }, (_, i) => ({ type: 'gradient_step' as const, data: { loss: i } })),
    ];
    const ids = await appendWorkerEvents(db, { job: leased, events: posted });
    expect(await attemptStarted(db, { job: leased })).toBe(true);

    // The ART polling loop: default page size 20, `after` = the last event id seen.
    const seen: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await listEvents(db, { job, after, limit: 20 });
      if (page.data.length === 0) break;
      seen.push(...page.data.map((e) => e.id));
      after = page.last_id;
    }
    expect(seen).toEqual(ids);
    expect((await listEvents(db, { job, after: ids[9], limit: 1 })).data[0].id).toBe(ids[10]);
    expect((await listEvents(db, { job, after: crypto.randomUUID(), limit: 1 })).data[0].id).toBe(ids[0]);
    expect((await listEvents(db, { job, after: 'not-an-id', limit: 1 })).data[0]).toEqual({ id: ids[0], type: 'training_started', data: { num_sequences: 44 } });
  });
});

describe('completing', () => {
  it('registers the checkpoint, appends training_ended and completes the job at once', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    const result = await complete(job.id, lease_token, { 'loss/train': 0.25 });
    expect(result).toMatchObject({ outcome: 'completed', job: { status: 'COMPLETED' }, checkpoint: { step: 1, metrics: { 'loss/train': 0.25 } } });
    expect(await eventTypes(job)).toEqual(['training_ended']);
    const latest = (await listCheckpoints(db, { model, limit: 1, order: 'desc' }))!;
    expect(latest.data[0]).toMatchObject({ step: 1, job_id: job.id });
  });

  it('answers a repeated complete with the same token with the first result and writes nothing more', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    const first = await complete(job.id, lease_token);
    const again = await complete(job.id, lease_token);
    expect(again).toEqual(first);
    expect(await eventTypes(job)).toEqual(['training_ended']);
    expect((await listCheckpoints(db, { model, limit: 20, order: 'asc' }))!.data).toHaveLength(1);
  });

  it('lets the model`s next job run after completion, one step further', async () => {
    const model = await newModel();
    await newJob(model);
    await newJob(model);
    const first = (await claim(model))!;
    expect(await claim(model)).toBeUndefined();
    await complete(first.job.id, first.lease_token);
    expect((await claim(model))!.job).toMatchObject({ base_step: 1, target_step: 2 });
  });
});

describe('failing', () => {
  it('requeues a retryable failure with attempts left', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    expect(await fail(job.id, lease_token, true)).toMatchObject({ status: 'QUEUED', attempt: 2, error_message: 'CUDA out of memory' });
    expect(await eventTypes(job)).toEqual([]);
    expect(await fail(job.id, lease_token, true)).toBeUndefined();
  });

  it('fails a permanent failure with a training_failed event', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    const failed = await fail(job.id, lease_token, false);
    expect(failed).toMatchObject({ status: 'FAILED', error_message: 'CUDA out of memory' });
    expect(failed!.training_end).not.toBeNull();
    expect((await listEvents(db, { job, limit: 20 })).data.map((e) => [e.type, e.data])).toEqual([['training_failed', { error_message: 'CUDA out of memory' }]]);
  });

  it('fails a retryable failure when no attempts are left', async () => {
    const model = await newModel();
    await newJob(model, { maxAttempts: 1 });
    const { job, lease_token } = (await claim(model))!;
    expect(await fail(job.id, lease_token, true)).toMatchObject({ status: 'FAILED', attempt: 1 });
  });
});

describe('canceling', () => {
  const cancel = (model: StoredModel, jobId: string) =>
    db.transaction().execute((trx) => cancelJob(trx, { entityIds: [model.entity_id], jobId }));

  it('cancels a queued job at once, with a terminal event for polling clients', async () => {
    const model = await newModel();
    const job = await newJob(model);
    expect(await cancel(model, job.id)).toMatchObject({ status: 'CANCELED' });
    expect(await eventTypes(job)).toEqual(['training_failed']);
    expect(await claim(model)).toBeUndefined();
  });

  it('asks a running job to stop through its heartbeat, and cancels it when the worker reports', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    expect(await cancel(model, job.id)).toMatchObject({ status: 'RUNNING', cancel_requested: true });
    expect(await heartbeat(db, { jobId: job.id, leaseToken: lease_token, leaseSeconds: 60 })).toMatchObject({ cancel_requested: true });
    expect(await fail(job.id, lease_token, true)).toMatchObject({ status: 'CANCELED' });
  });

  it('cancels a running job asked to stop when its lease lapses', async () => {
    const model = await newModel();
    await newJob(model);
    const { job } = (await claim(model))!;
    await cancel(model, job.id);
    await expireLease(job.id);
    const swept = await db.transaction().execute((trx) => sweepExpiredLeases(trx, { limit: 100 }));
    expect(swept.find((j) => j.id === job.id)).toMatchObject({ status: 'CANCELED' });
  });

  it('registers no checkpoint when a job asked to stop completes', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    await cancel(model, job.id);
    expect(await complete(job.id, lease_token)).toMatchObject({ outcome: 'canceled', job: { status: 'CANCELED' } });
    expect((await listCheckpoints(db, { model, limit: 20, order: 'asc' }))!.data).toEqual([]);
  });

  it('leaves a finished job as it is and does not cancel another entity`s job', async () => {
    const model = await newModel();
    await newJob(model);
    const { job, lease_token } = (await claim(model))!;
    await complete(job.id, lease_token);
    expect(await cancel(model, job.id)).toMatchObject({ status: 'COMPLETED' });
    const stranger = await createEntity(db);
    expect(await db.transaction().execute((trx) => cancelJob(trx, { entityIds: [stranger], jobId: job.id }))).toBeUndefined();
  });

  it('cancels queued jobs and asks running ones to stop when their model is deleted', async () => {
    const model = await newModel();
    await newJob(model);
    const queued = await newJob(model);
    const { job: running } = (await claim(model))!;
    await db.transaction().execute((trx) => deleteModel(trx, { model }));
    expect(await findJob(db, { entityIds: [model.entity_id], jobId: queued.id })).toMatchObject({ status: 'CANCELED' });
    expect(await findJob(db, { entityIds: [model.entity_id], jobId: running.id })).toMatchObject({ status: 'RUNNING', cancel_requested: true });
  });

  it('cancels, not requeues, an attempt that ends on a deleted model (a retryable failure or a lapsed lease)', async () => {
    // A delete whose cancel missed the attempt (the requeue race it now closes) left it running without
    // cancel_requested: the model is marked deleted here directly, as such a delete would have left it.
    for (const end of ['fail', 'lease'] as const) {
      const model = await newModel();
      await newJob(model);
      const { job, lease_token } = (await claim(model))!;
      await db.updateTable('models').set({ deleted_at: new Date() }).where('id', '=', model.id).execute();
      const ended =
        end === 'fail'
          ? await fail(job.id, lease_token, true)
          : (await expireLease(job.id), (await db.transaction().execute((trx) => sweepExpiredLeases(trx, { limit: 100 }))).find((j) => j.id === job.id));
      expect(ended, end).toMatchObject({ status: 'CANCELED', attempt: 1, error_message: 'training job was canceled' });
      expect((await listEvents(db, { job, limit: 20 })).data.map((e) => [e.type, e.data]), end).toEqual([
        ['training_failed', { error_message: 'training job was canceled' }],
      ]);
    }
  });
});

describe('workers', () => {
  it('records workers as they call in and lists the recent ones', async () => {
    await touchWorker(db, { workerId: 'gpu-7', apiKeyId: null });
    await touchWorker(db, { workerId: 'gpu-7', apiKeyId: null });
    const active = await listActiveWorkers(db, { seenWithinSeconds: 60, limit: 100 });
    expect(active.filter((w) => w.worker_id === 'gpu-7')).toHaveLength(1);
  });

  it('counts queued and running jobs, and no finished ones', async () => {
    const before = await countJobsByStatus(db);
    const model = await newModel();
    await newJob(model);
    await newJob(model);
    await claim(model);
    const after = await countJobsByStatus(db);
    expect(after.QUEUED).toBe((before.QUEUED ?? 0) + 1);
    expect(after.RUNNING).toBe((before.RUNNING ?? 0) + 1);
    expect(Object.keys(after).sort()).toEqual(['QUEUED', 'RUNNING']);
  });
});
