import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { call, groupGenerationA, ScriptedWorker, staleBody, userWithModel, type ClaimedJob } from './fixtures.js';

let app: App;

beforeAll(async () => {
  // A fast sweeper and two attempts, so that lease expiry (forced by expireLease) and the last attempt are
  // quick to reach. Leases are long so that no earlier test's lease lapses on its own while a later test
  // compares database fingerprints, however slowly a loaded machine runs the file.
  app = await createTestApp({ LEASE_SWEEP_INTERVAL_MS: '100', JOB_MAX_ATTEMPTS: '2', WORKER_LEASE_SECONDS: '600' });
});
afterAll(async () => {
  await app.close();
});


/** A user, a model of its own base model, a worker that claims only that base model, and a way to queue jobs. */
async function setup(): Promise<{ user: TestUser; model: any; worker: ScriptedWorker; queue: (groups?: number) => Promise<string> }> {
  const { user, model, baseModel } = await userWithModel(app);
  const worker = await ScriptedWorker.create(app, user, [baseModel]);
  const queue = async (groups = 1) => {
    const reply = await call(app, user.headers, 'POST', '/v1/preview/training-jobs', {
      model_id: model.id,
      trajectory_groups: Array.from({ length: groups }, () => groupGenerationA()),
    });
    expect(reply.status, reply.text).toBe(200);
    return reply.body.id as string;
  };
  return { user, model, worker, queue };
}

const getJob = async (user: TestUser, jobId: string) => (await call(app, user.headers, 'GET', `/v1/preview/training-jobs/${jobId}`)).body;
const eventsOf = async (user: TestUser, jobId: string) =>
  (await call(app, user.headers, 'GET', `/v1/preview/training-jobs/${jobId}/events?limit=100`)).body.data as { type: string; data: any }[];

async function expireLease(jobId: string): Promise<void> {
  await sql`update training_jobs set lease_expires_at = now() - interval '1 second' where id = ${jobId}`.execute(app.db);
}

/** Waits for the sweeper (100 ms) to move the job out of RUNNING. */
async function waitForStatus(user: TestUser, jobId: string, status: string): Promise<any> {
  for (let i = 0; i < 100; i++) {
    const job = await getJob(user, jobId);
    if (job.status === status) return job;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`job ${jobId} never became ${status}`);
}

const started = { type: 'training_started', data: { num_sequences: 2 } };
const step = (loss: number) => ({ type: 'gradient_step', data: { loss } });

describe('settings', () => {
  it('tells a worker which checkpoint URIs the server registers, and only a worker key may ask', async () => {
    const { user, worker } = await setup();
    const reply = await worker.call('GET', '/v1/workers/settings');
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({ checkpoint_uri_prefixes: ['/adapters/', 's3://'] });

    const refused = await call(app, user.headers, 'GET', '/v1/workers/settings');
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ detail: 'This route is for trainer workers: call it with a worker key (npm run cli -- keys create USER --kind worker).' });
  });
});

describe('claiming', () => {
  it('answers 204 when no job is queued for the worker', async () => {
    const { worker } = await setup();
    const reply = await worker.call('POST', '/v1/workers/claim', { worker_id: worker.workerId, base_models: worker.baseModels });
    expect(reply.status).toBe(204);
    expect(reply.text).toBe('');
  });

  it('leases the job with its model, no base checkpoint, target step 1 and where to read its inputs', async () => {
    const { user, model, worker, queue } = await setup();
    const jobId = await queue(2);
    const claimed = await worker.claim();
    expect(claimed).toEqual({
      job: {
        id: jobId,
        kind: 'rl',
        attempt: 1,
        model: { id: model.id, entity: user.entity, project: 'proj', name: model.name, base_model: model.base_model },
        base_checkpoint: null,
        kl_reference_checkpoint: null,
        target_step: 1,
        config: { experimental_config: {} },
        num_inputs: 2,
        inputs_url: `/v1/workers/jobs/${jobId}/inputs`,
      },
      lease: { token: expect.stringMatching(/^[0-9a-f-]{36}$/), expires_at: expect.any(String), expires_in_ms: 600_000 },
    });
    expect(new Date(claimed!.lease.expires_at).getTime()).toBeGreaterThan(Date.now() + 20_000);
    expect(await getJob(user, jobId)).toMatchObject({ status: 'RUNNING', training_start: expect.any(String), base_step: 0, target_step: 1 });
  });

  it('runs a model\'s jobs one at a time in creation order, each from the previous checkpoint', async () => {
    const { worker, queue } = await setup();
    const first = await queue();
    const second = await queue();
    const claimed = (await worker.claim())!;
    expect(claimed.job.id).toBe(first);
    expect(await worker.claim()).toBeUndefined(); // the second waits for the first
    const completed = await worker.complete(claimed);
    const next = (await worker.claim())!;
    expect(next.job).toMatchObject({ id: second, target_step: 2, base_checkpoint: { id: completed.body.checkpoint.id, step: 1, uri: completed.body.checkpoint.uri } });
  });

  it('takes only the kinds and base models the worker asks for', async () => {
    const { worker, queue } = await setup();
    await queue();
    expect(await worker.claim(0, { kinds: ['sft'] })).toBeUndefined();
    expect(await worker.claim(0, { kinds: ['rl'] })).toBeDefined();
  });

  it('a claim repeated with its claim_id gets the same job and lease back, renewed, while the job runs', async () => {
    const { user, worker, queue } = await setup();
    const { user: other } = await setup();
    const jobId = await queue();
    await queue(); // the model's next job, which the repeated claim must not take once the first ends
    const claimId = crypto.randomUUID();
    const first = (await worker.claim(0, { claim_id: claimId }))!;
    await sql`update training_jobs set lease_expires_at = now() + interval '5 seconds' where id = ${jobId}`.execute(app.db);

    // The answer was lost; the worker asks again with the same id.
    const again = (await worker.claim(0, { claim_id: claimId }))!;
    expect(again).toEqual({ ...first, lease: { token: first.lease.token, expires_at: expect.any(String), expires_in_ms: 600_000 } });
    expect(new Date(again.lease.expires_at).getTime()).toBeGreaterThan(Date.now() + 20_000);
    expect(await getJob(user, jobId)).toMatchObject({ status: 'RUNNING', attempt: 1 });

    // Not for another worker id, nor another tenant's worker with the same worker id and claim id.
    const sameKey = new ScriptedWorker(app, worker.headers, worker.baseModels);
    expect(await sameKey.claim(0, { claim_id: claimId })).toBeUndefined();
    const otherTenant = new ScriptedWorker(app, (await createWorkerKey(app, other.username)).headers, worker.baseModels, worker.workerId);
    expect(await otherTenant.claim(0, { claim_id: claimId })).toBeUndefined();

    // Once the job has ended, the id holds nothing: the claim takes the next job as usual.
    expect((await worker.complete(first)).status).toBe(200);
    const next = (await worker.claim(0, { claim_id: claimId }))!;
    expect(next.job.id).not.toBe(jobId);
    expect(next.lease.token).not.toBe(first.lease.token);
  });

  it('a claim_id that is not a UUID is a 422 and takes nothing', async () => {
    const { worker, queue } = await setup();
    const jobId = await queue();
    const reply = await worker.call('POST', '/v1/workers/claim', { worker_id: worker.workerId, base_models: worker.baseModels, claim_id: 'retry-1' });
    expect(reply.status).toBe(422);
    expect(reply.body).toEqual({
      detail: [
        { type: 'uuid_parsing', loc: ['body', 'claim_id'], msg: 'Input should be a valid UUID', input: 'retry-1', ctx: { error: 'Invalid UUID' } },
      ],
    });
    expect((await worker.claim())!.job.id).toBe(jobId);
  });

  it('a waiting claim wakes when a job is queued', async () => {
    const { worker, queue } = await setup();
    const waiting = worker.claim(20);
    await new Promise((resolve) => setTimeout(resolve, 150));
    const jobId = await queue();
    expect((await waiting)?.job.id).toBe(jobId);
  });

  it('a waiting claim whose key is revoked meanwhile answers 401 and takes no job queued after', async () => {
    const { user, model, baseModel } = await userWithModel(app);
    const { key, record } = await app.auth.createKey({ username: user.username, kind: 'worker' });
    const worker = new ScriptedWorker(app, { authorization: `Bearer ${key}` }, [baseModel]);
    const waiting = worker.call('POST', '/v1/workers/claim', { worker_id: worker.workerId, base_models: [baseModel], wait_seconds: 20 });
    // The claim records its worker before its first look for a job: on a loaded machine 150 ms alone may
    // not see it that far, and a claim still authenticating when the key is revoked is not this case.
    while (!(await app.db.selectFrom('workers').select('worker_id').where('worker_id', '=', worker.workerId).executeTakeFirst())) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
    await app.auth.revokeKey({ keyId: record.id });
    const queued = await call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const reply = await waiting;
    expect([reply.status, reply.body]).toEqual([401, { detail: 'Invalid or revoked API key.' }]);
    expect((await getJob(user, queued.body.id)).status).toBe('QUEUED');
  });

  it('a waiting claim of a member taken out of a team meanwhile takes none of the team\'s jobs', async () => {
    const team = uniqueName('team');
    await app.auth.createTeam({ name: team });
    const [member, stays] = [await createUserWithKey(app), await createUserWithKey(app)];
    for (const user of [member, stays]) await app.auth.addMember({ team, username: user.username });
    const baseModel = uniqueName('base');
    const model = (await call(app, member.headers, 'POST', '/v1/preview/models', { project: 'p', name: 'm', base_model: baseModel, entity: team })).body;
    expect(model.entity).toBe(team);
    const worker = await ScriptedWorker.create(app, member, [baseModel]);
    const waiting = worker.claim(2);
    await new Promise((resolve) => setTimeout(resolve, 150));
    await app.auth.removeMember({ team, username: member.username });
    const queued = await call(app, stays.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    expect(queued.status, queued.text).toBe(200);
    expect(await waiting).toBeUndefined();
    expect((await getJob(stays, queued.body.id)).status).toBe('QUEUED');
  });

  it('a waiting claim answers 204 when the app closes, without holding the shutdown', async () => {
    const closing = await createTestApp();
    const user = await createUserWithKey(closing);
    const worker = new ScriptedWorker(closing, (await createWorkerKey(closing, user.username)).headers, ['none']);
    const waiting = worker.call('POST', '/v1/workers/claim', { worker_id: worker.workerId, wait_seconds: 30 });
    await new Promise((resolve) => setTimeout(resolve, 150));
    await closing.close();
    expect((await waiting).status).toBe(204);
  });
});

describe('inputs', () => {
  it('streams one group per line as JSON Lines, in the order sent, across many pages', async () => {
    const { user, model, worker } = await setup();
    const groups = Array.from({ length: 70 }, (_, i) => ({ trajectories: [{ reward: i, messages_and_choices: [{ role: 'user', content: `n${i}` }] }] }));
    const created = await call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: groups });
    const claimed = (await worker.claim())!;
    expect(claimed.job.id).toBe(created.body.id);
    const response = await app.inject({ method: 'GET', url: claimed.job.inputs_url, headers: worker.headers });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^application\/x-ndjson/);
    const lines = response.body.split('\n');
    expect(lines.pop()).toBe('');
    expect(lines.map((line) => JSON.parse(line))).toEqual(groups);
  });

  it('hands the trainer integers beyond 2^53 as the client wrote them', async () => {
    const { user, model, worker } = await setup();
    const text = `{"model_id":"${model.id}","trajectory_groups":[{"trajectories":[{"reward":0.5,"metadata":{"id":12345678901234567890}}]}]}`;
    const created = await app.inject({ method: 'POST', url: '/v1/preview/training-jobs', headers: { ...user.headers, 'content-type': 'application/json' }, payload: text });
    expect(created.statusCode, created.body).toBe(200);
    const claimed = (await worker.claim())!;
    const response = await app.inject({ method: 'GET', url: claimed.job.inputs_url, headers: worker.headers });
    expect(response.body).toBe('{"trajectories": [{"reward": 0.5, "metadata": {"id": 12345678901234567890}}]}\n');
  });

  it('answers 404 for an unknown job', async () => {
    const { worker } = await setup();
    const id = crypto.randomUUID();
    const reply = await worker.call('GET', `/v1/workers/jobs/${id}/inputs`);
    expect(reply).toMatchObject({ status: 404, body: { detail: `training job ${id} not found` } });
  });
});

describe('leases', () => {
  it('a heartbeat renews the lease and says whether a cancel was asked for', async () => {
    const { worker, queue } = await setup();
    await queue();
    const claimed = (await worker.claim())!;
    const reply = await worker.heartbeat(claimed);
    expect(reply).toMatchObject({ status: 200, body: { expires_at: expect.any(String), expires_in_ms: 600_000, cancel_requested: false } });
    expect(new Date(reply.body.expires_at).getTime()).toBeGreaterThanOrEqual(new Date(claimed.lease.expires_at).getTime());
  });

  it('a lapsed lease is swept: the job is requeued with the next attempt and the old token can change nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const first = (await worker.claim())!;
    expect((await worker.events(first, [started, step(1)])).status).toBe(200);
    await expireLease(jobId);
    const requeued = await waitForStatus(user, jobId, 'QUEUED');
    expect(requeued).toMatchObject({ attempt: 2, error_message: `lease of worker ${worker.workerId} expired` });

    const before = await databaseFingerprint(app);
    for (const reply of [await worker.heartbeat(first), await worker.events(first, [step(2)]), await worker.complete(first), await worker.fail(first, 'x', true)]) {
      expect(reply).toEqual({ status: 409, body: staleBody(jobId), text: expect.any(String) });
    }
    expect(await databaseFingerprint(app)).toEqual(before);

    const second = (await worker.claim())!;
    expect(second.job).toMatchObject({ id: jobId, attempt: 2, target_step: 1 });
    expect(second.lease.token).not.toBe(first.lease.token);
    // the new attempt starts again; the old attempt's events stay in the log before it
    expect((await worker.events(second, [started, step(3)])).status).toBe(200);
    expect((await worker.complete(second)).status).toBe(200);
    expect((await eventsOf(user, jobId)).map((e) => e.type)).toEqual([
      'training_started',
      'gradient_step',
      'training_started',
      'gradient_step',
      'training_ended',
    ]);
  });

  it('a lease that lapses on the last attempt fails the job with training_failed', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    for (const attempt of [1, 2]) {
      const claimed = (await worker.claim())!;
      expect(claimed.job.attempt).toBe(attempt);
      await expireLease(jobId);
      await waitForStatus(user, jobId, attempt === 1 ? 'QUEUED' : 'FAILED');
    }
    const job = await getJob(user, jobId);
    expect(job).toMatchObject({ status: 'FAILED', attempt: 2, training_end: expect.any(String), error_message: `lease of worker ${worker.workerId} expired` });
    expect((await eventsOf(user, jobId)).at(-1)).toEqual({ id: expect.any(String), type: 'training_failed', data: { error_message: `lease of worker ${worker.workerId} expired` } });
  });

  it('a wrong token is a 409 on every call and changes nothing', async () => {
    const { worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const forged: ClaimedJob = { ...claimed, lease: { ...claimed.lease, token: crypto.randomUUID() } };
    const before = await databaseFingerprint(app);
    for (const reply of [await worker.heartbeat(forged), await worker.events(forged, [started]), await worker.complete(forged), await worker.fail(forged, 'x', false)]) {
      expect(reply.status).toBe(409);
      expect(reply.body).toEqual(staleBody(jobId));
    }
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});

describe('events', () => {
  it('refuses a gradient_step before training_started, appending nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const reply = await worker.events(claimed, [step(1)]);
    expect(reply.status).toBe(422);
    expect(reply.body).toEqual({
      detail: [{ type: 'value_error', loc: ['body', 'events', 0, 'type'], msg: 'Value error, gradient_step must come after training_started', input: 'gradient_step' }],
    });
    expect(await eventsOf(user, jobId)).toEqual([]);
  });

  it('refuses a second training_started in one attempt, appending nothing of the batch', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    expect((await worker.events(claimed, [started])).status).toBe(200);
    const reply = await worker.events(claimed, [step(1), started]);
    expect(reply.body).toEqual({
      detail: [{ type: 'value_error', loc: ['body', 'events', 1, 'type'], msg: 'Value error, training_started was already posted for this attempt', input: 'training_started' }],
    });
    expect((await eventsOf(user, jobId)).map((e) => e.type)).toEqual(['training_started']);
  });

  it('refuses gradient data that is not numbers, appending nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    expect((await worker.events(claimed, [started])).status).toBe(200);
    for (const bad of ['0.5', null, { nested: 1 }, true, [1]]) {
      const reply = await worker.events(claimed, [step(1), { type: 'gradient_step', data: { loss: bad } }]);
      expect(reply.status).toBe(422);
      expect(reply.body.detail[0]).toMatchObject({ type: 'float_type', loc: ['body', 'events', 1, 'data', 'loss'], msg: 'Input should be a valid number' });
    }
    expect((await eventsOf(user, jobId)).map((e) => e.type)).toEqual(['training_started']);
  });
});

describe('re-posted events (first_seq)', () => {
  /** Posts events as the worker runtime does, with how many it posted before them in the attempt. */
  const postNumbered = (worker: ScriptedWorker, claimed: ClaimedJob, events: { type: string; data: Record<string, unknown> }[], firstSeq: number) =>
    worker.call('POST', `/v1/workers/jobs/${claimed.job.id}/events`, { lease_token: claimed.lease.token, events, first_seq: firstSeq });

  it('a batch posted again after a lost response answers the same ids and appends nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const first = await postNumbered(worker, claimed, [started], 0);
    const posted = await postNumbered(worker, claimed, [step(1)], 1);
    expect(posted).toEqual({ status: 200, body: { ids: [expect.any(String)] }, text: expect.any(String) });
    const before = await databaseFingerprint(app);
    expect(await postNumbered(worker, claimed, [step(1)], 1)).toEqual(posted);
    expect(await databaseFingerprint(app)).toEqual(before);
    expect(await eventsOf(user, jobId)).toEqual([
      { id: first.body.ids[0], type: 'training_started', data: { num_sequences: 2 } },
      { id: posted.body.ids[0], type: 'gradient_step', data: { loss: 1 } },
    ]);
  });

  it('a batch posted again as the same text answers the same ids when its data holds -0.0 (stored as 0)', async () => {
    const { worker, queue } = await setup();
    await queue();
    const claimed = (await worker.claim())!;
    await postNumbered(worker, claimed, [started], 0);
    // Python's json.dumps writes a zero loss of a zero advantage as -0.0; JSON.stringify would write 0.
    const text = `{"lease_token": "${claimed.lease.token}", "first_seq": 1, "events": [{"type": "gradient_step", "data": {"loss": -0.0, "grad_norm": 0.5}}]}`;
    const post = () =>
      app.inject({ method: 'POST', url: `/v1/workers/jobs/${claimed.job.id}/events`, headers: { ...worker.headers, 'content-type': 'application/json' }, payload: text });
    const first = await post();
    expect(first.statusCode, first.body).toBe(200);
    const again = await post();
    expect(again.statusCode, again.body).toBe(200);
    expect(again.json()).toEqual(first.json());
  });

  it('a batch that overlaps the stored events appends only the ones after them', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const first = await postNumbered(worker, claimed, [started, step(1)], 0);
    const overlapping = await postNumbered(worker, claimed, [step(1), step(2)], 1);
    expect(overlapping.body).toEqual({ ids: [first.body.ids[1], expect.any(String)] });
    expect(await eventsOf(user, jobId)).toEqual([
      { id: first.body.ids[0], type: 'training_started', data: { num_sequences: 2 } },
      { id: first.body.ids[1], type: 'gradient_step', data: { loss: 1 } },
      { id: overlapping.body.ids[1], type: 'gradient_step', data: { loss: 2 } },
    ]);
  });

  it('refuses a first_seq past the events stored for the attempt, appending nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    expect((await postNumbered(worker, claimed, [started], 0)).status).toBe(200);
    expect(await postNumbered(worker, claimed, [step(2)], 2)).toEqual({
      status: 422,
      body: {
        detail: [
          { type: 'value_error', loc: ['body', 'first_seq'], msg: 'Value error, first_seq 2 is past the 1 events stored for this attempt: post the events before it first', input: 2 },
        ],
      },
      text: expect.any(String),
    });
    expect((await eventsOf(user, jobId)).map((e) => e.type)).toEqual(['training_started']);
  });

  it('refuses a re-posted batch whose events are not the ones stored at its place', async () => {
    const { worker, queue } = await setup();
    await queue();
    const claimed = (await worker.claim())!;
    expect((await postNumbered(worker, claimed, [started, step(1)], 0)).status).toBe(200);
    expect((await postNumbered(worker, claimed, [started, started], 0)).body).toEqual({
      detail: [
        {
          type: 'value_error',
          loc: ['body', 'events', 1, 'type'],
          msg: 'Value error, training_started differs from the gradient_step stored at sequence number 1 of this attempt',
          input: 'training_started',
        },
      ],
    });
    // The same types with other data are another batch, not a re-post: its data would be lost.
    expect((await postNumbered(worker, claimed, [started, step(2)], 0)).body).toEqual({
      detail: [
        {
          type: 'value_error',
          loc: ['body', 'events', 1, 'data'],
          msg: 'Value error, the data of this gradient_step differs from that stored at sequence number 1 of this attempt',
          input: { loss: 2 },
        },
      ],
    });
    // The same batch again is a re-post.
    expect((await postNumbered(worker, claimed, [started, step(1)], 0)).status).toBe(200);
  });

  it('counts from the start of each attempt: a requeued job posts from first_seq 0 again', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const first = (await worker.claim())!;
    expect((await postNumbered(worker, first, [started, step(1)], 0)).status).toBe(200);
    expect((await worker.fail(first, 'CUDA out of memory', true)).status).toBe(200);
    const second = (await worker.claim())!;
    const again = await postNumbered(worker, second, [started], 0);
    expect(again.status).toBe(200);
    expect((await eventsOf(user, jobId)).map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'training_started']);
  });
});

describe('completing', () => {
  it('registers the checkpoint and training_ended together, and a repeat with the same token answers the same', async () => {
    const { user, model, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    await worker.events(claimed, [started, step(0.5)]);
    const first = await worker.complete(claimed, { 'loss/train': 0.5 });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      job: expect.objectContaining({ id: jobId, status: 'COMPLETED', training_end: expect.any(String), target_step: 1 }),
      checkpoint: { id: expect.any(String), step: 1, uri: `s3://checkpoints/${model.name}/1`, metrics: { 'loss/train': 0.5 } },
    });
    const before = await databaseFingerprint(app);
    const repeat = await worker.complete(claimed, { 'loss/train': 0.5 });
    expect(repeat.body).toEqual(first.body);
    expect(await databaseFingerprint(app)).toEqual(before);
    const checkpoints = await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints`);
    expect(checkpoints.body.data).toEqual([{ id: first.body.checkpoint.id, step: 1, metrics: { 'loss/train': 0.5 } }]);
    const events = await eventsOf(user, jobId);
    expect(events.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'training_ended']);
    expect(events[2].data).toEqual({ step: 1, checkpoint_id: first.body.checkpoint.id });
  });

  it('a repeat of a completion whose checkpoint retention has since deleted answers as the first did, writing nothing', async () => {
    const { user, model, worker, queue } = await setup();
    expect((await call(app, user.headers, 'PUT', `/v1/preview/models/${model.id}/retention`, { keep_latest: 1 })).status).toBe(200);
    await queue();
    const claimed = (await worker.claim())!;
    await worker.events(claimed, [started, step(0.5)]);
    const first = await worker.complete(claimed, { 'loss/train': 0.5 });
    expect(first.status).toBe(200);
    // The next step lands and keep_latest deletes the first job's checkpoint.
    await queue();
    const next = (await worker.claim())!;
    expect((await worker.complete(next, { 'loss/train': 0.4 })).status).toBe(200);
    expect((await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints`)).body.data.map((c: { step: number }) => c.step)).toEqual([2]);

    const before = await databaseFingerprint(app);
    const repeat = await worker.complete(claimed, { 'loss/train': 0.5 });
    expect(repeat).toEqual({ status: 200, body: first.body, text: expect.any(String) });
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});

describe('bounds', () => {
  it('refuses a checkpoint URI over 4,096 characters and more than 1,000 metrics, registering nothing', async () => {
    const { user, model, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    await worker.events(claimed, [started]);
    const before = await databaseFingerprint(app);
    const long = `/adapters/${'x'.repeat(4087)}`;
    const tooLong = await worker.complete(claimed, {}, long);
    expect(tooLong.status).toBe(422);
    expect(tooLong.body).toEqual({
      // The echo of a long input is its JSON, cut to 2,048 characters.
      detail: [{ type: 'string_too_long', loc: ['body', 'checkpoint', 'uri'], msg: 'String should have at most 4096 characters', input: `${JSON.stringify(long).slice(0, 2048)}…`, ctx: { max_length: 4096 } }],
    });
    const metrics = Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`m${i}`, i]));
    const tooMany = await worker.complete(claimed, metrics);
    expect(tooMany.status).toBe(422);
    expect(tooMany.body.detail).toMatchObject([{ type: 'value_error', loc: ['body', 'checkpoint', 'metrics'], msg: 'Value error, at most 1000 metrics in one map' }]);
    expect(await databaseFingerprint(app)).toEqual(before);
    expect((await worker.complete(claimed, {}, `/adapters/${'x'.repeat(4086)}`)).status).toBe(200);
    expect((await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints`)).body.data).toHaveLength(1);
    expect((await getJob(user, jobId)).status).toBe('COMPLETED');
  });

  it('refuses gradient data with a key over 256 characters, appending nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const reply = await worker.events(claimed, [started, { type: 'gradient_step', data: { ['k'.repeat(257)]: 1 } }]);
    expect(reply.status).toBe(422);
    expect(reply.body.detail).toEqual([
      { type: 'string_too_long', loc: ['body', 'events', 1, 'data', 'k'.repeat(257), '[key]'], msg: 'String should have at most 256 characters', input: 'k'.repeat(257), ctx: { max_length: 256 } },
    ]);
    expect(await eventsOf(user, jobId)).toEqual([]);
  });

  it('refuses training_started data with more than 1,000 keys or a key over 256 characters, appending nothing', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const before = await databaseFingerprint(app);
    const many = { num_sequences: 2, ...Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, i])) };
    expect(await worker.events(claimed, [{ type: 'training_started', data: many }])).toEqual({
      status: 422,
      body: {
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'events', 0, 'data'],
            msg: 'Value error, at most 1000 keys in training_started data',
            input: `${JSON.stringify(many).slice(0, 2048)}…`,
            ctx: { error: 'at most 1000 keys in training_started data' },
          },
        ],
      },
      text: expect.any(String),
    });
    const longKey = 'k'.repeat(257);
    expect(await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 2, [longKey]: 1 } }])).toEqual({
      status: 422,
      body: {
        detail: [
          { type: 'string_too_long', loc: ['body', 'events', 0, 'data', longKey, '[key]'], msg: 'String should have at most 256 characters', input: longKey, ctx: { max_length: 256 } },
        ],
      },
      text: expect.any(String),
    });
    expect(await databaseFingerprint(app)).toEqual(before);
    expect(await eventsOf(user, jobId)).toEqual([]);
    // At the bounds it is accepted.
    const atBound = { num_sequences: 2, ...Object.fromEntries(Array.from({ length: 999 }, (_, i) => [`${'k'.repeat(250)}${i}`, i])) };
    expect((await worker.events(claimed, [{ type: 'training_started', data: atBound }])).status).toBe(200);
  });
});

describe('failing', () => {
  it('a retryable failure requeues with the next attempt; on the last attempt it fails the job', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const first = (await worker.claim())!;
    const requeued = await worker.fail(first, 'CUDA out of memory', true);
    expect(requeued).toMatchObject({ status: 200, body: { job: { id: jobId, status: 'QUEUED', attempt: 2, error_message: 'CUDA out of memory' } } });
    const second = (await worker.claim())!;
    const failed = await worker.fail(second, 'CUDA out of memory again', true);
    expect(failed.body.job).toMatchObject({ status: 'FAILED', attempt: 2, error_message: 'CUDA out of memory again', training_end: expect.any(String) });
    expect((await eventsOf(user, jobId)).map((e) => [e.type, e.data])).toEqual([['training_failed', { error_message: 'CUDA out of memory again' }]]);
  });

  it('a permanent failure fails the job at once with training_failed', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    const reply = await worker.fail(claimed, 'tokenizer mismatch', false);
    expect(reply.body.job).toMatchObject({ status: 'FAILED', attempt: 1, error_message: 'tokenizer mismatch' });
    expect(await eventsOf(user, jobId)).toEqual([{ id: expect.any(String), type: 'training_failed', data: { error_message: 'tokenizer mismatch' } }]);
    expect(await worker.claim()).toBeUndefined();
  });
});

describe('canceling', () => {
  const cancel = (user: TestUser, jobId: string) => call(app, user.headers, 'POST', `/v1/preview/training-jobs/${jobId}/cancel`);

  it('a queued job is canceled at once, with a training_failed event for polling clients', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const reply = await cancel(user, jobId);
    expect(reply.body).toMatchObject({ id: jobId, status: 'CANCELED', error_message: 'training job was canceled', training_end: expect.any(String) });
    expect(await eventsOf(user, jobId)).toEqual([{ id: expect.any(String), type: 'training_failed', data: { error_message: 'training job was canceled' } }]);
    expect(await worker.claim()).toBeUndefined();
  });

  it('a running job hears of the cancel on its heartbeat and ends CANCELED when the worker reports', async () => {
    const { user, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    expect((await cancel(user, jobId)).body).toMatchObject({ status: 'RUNNING', cancel_requested: true });
    expect((await worker.heartbeat(claimed)).body).toMatchObject({ cancel_requested: true });
    const reply = await worker.fail(claimed, 'stopped on request', false);
    expect(reply.body.job).toMatchObject({ status: 'CANCELED', error_message: 'training job was canceled' });
    expect((await eventsOf(user, jobId)).at(-1)?.type).toBe('training_failed');
  });

  it('a running job asked to cancel registers no checkpoint when the worker completes it anyway', async () => {
    const { user, model, worker, queue } = await setup();
    const jobId = await queue();
    const claimed = (await worker.claim())!;
    await cancel(user, jobId);
    const reply = await worker.complete(claimed);
    expect(reply).toMatchObject({ status: 409, body: { detail: `Training job ${jobId} was canceled; no checkpoint was registered.` } });
    expect((await getJob(user, jobId)).status).toBe('CANCELED');
    expect((await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints`)).body.data).toEqual([]);
  });

  it('a running job asked to cancel ends CANCELED when its lease lapses', async () => {
    const { user, queue, worker } = await setup();
    const jobId = await queue();
    await worker.claim();
    await cancel(user, jobId);
    await expireLease(jobId);
    expect(await waitForStatus(user, jobId, 'CANCELED')).toMatchObject({ error_message: 'training job was canceled' });
  });
});

describe('system checks', () => {
  it('gpu_queue fails until a worker calls in; cpu_queue shows the queue depth', async () => {
    const fresh = await createTestApp();
    try {
      const before = (await fresh.inject({ method: 'GET', url: '/v1/system-check' })).json();
      expect(before.cpu_queue).toEqual({ success: true, duration_ms: expect.any(Number), depth: 0, running: 0 });
      expect(before.gpu_queue).toEqual({
        success: false,
        duration_ms: expect.any(Number),
        error: 'no trainer worker has called in within the last 120 s (WORKER_SEEN_SECONDS): start one with a worker key (docs/workers.md)',
      });
      const user = await createUserWithKey(fresh);
      const worker = new ScriptedWorker(fresh, (await createWorkerKey(fresh, user.username)).headers, ['none']);
      await worker.claim();
      const after = await fresh.inject({ method: 'GET', url: '/v1/system-check' });
      expect(after.statusCode).toBe(200);
      expect(after.json().gpu_queue).toEqual({ success: true, duration_ms: expect.any(Number), workers_seen: 1, running: 0 });
    } finally {
      await fresh.close();
    }
  });

  it('gpu_queue counts the workers of each key, also when two keys\' workers share a worker id', async () => {
    const fresh = await createTestApp();
    try {
      const workerId = uniqueName('gpu');
      for (const user of [await createUserWithKey(fresh), await createUserWithKey(fresh)]) {
        await new ScriptedWorker(fresh, (await createWorkerKey(fresh, user.username)).headers, ['none'], workerId).claim();
      }
      const reply = await fresh.inject({ method: 'GET', url: '/v1/system-check' });
      expect(reply.json().gpu_queue).toEqual({ success: true, duration_ms: expect.any(Number), workers_seen: 2, running: 0 });
    } finally {
      await fresh.close();
    }
  });
});

describe('the workers table', () => {
  const residentOf = (base: string) => [{ base_model: base, model_id: null }];
  const adminWorkers = async (admin: TestUser, query = '') => call(app, admin.headers, 'GET', `/v1/admin/workers${query}`);

  it('keeps a row per key: another tenant\'s worker of the same worker id does not overwrite it', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    const workerId = uniqueName('gpu');
    const ours = new ScriptedWorker(app, (await createWorkerKey(app, (await createUserWithKey(app)).username)).headers, ['none'], workerId);
    const theirs = new ScriptedWorker(app, (await createWorkerKey(app, (await createUserWithKey(app)).username)).headers, ['none'], workerId);
    await ours.claim(0, { resident_trainers: residentOf('ours') });
    await theirs.claim(0, { resident_trainers: residentOf('theirs') });
    const listed = (await adminWorkers(admin)).body.data.filter((w: { worker_id: string }) => w.worker_id === workerId);
    const row = (base: string) => ({ id: expect.any(String), worker_id: workerId, api_key_id: expect.any(String), last_seen_at: expect.any(String), resident_trainers: residentOf(base) });
    expect(listed).toEqual([row('theirs'), row('ours')]);
    expect(listed[0].api_key_id).not.toBe(listed[1].api_key_id);
  });

  it('the admin listing comes in pages of `limit`, most recent first, continued with `after`', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    const user = await createUserWithKey(app);
    const headers = (await createWorkerKey(app, user.username)).headers;
    const ids = [uniqueName('w'), uniqueName('w'), uniqueName('w')];
    for (const workerId of ids) await new ScriptedWorker(app, headers, ['none'], workerId).claim();
    const first = await adminWorkers(admin, '?limit=2');
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      object: 'list',
      data: [expect.objectContaining({ worker_id: ids[2] }), expect.objectContaining({ worker_id: ids[1] })],
      first_id: first.body.data[0].id,
      last_id: first.body.data[1].id,
      has_more: true,
    });
    const next = await adminWorkers(admin, `?limit=2&after=${first.body.last_id}`);
    expect(next.body.data[0]).toEqual(expect.objectContaining({ worker_id: ids[0] }));
    const unknown = crypto.randomUUID();
    expect(await adminWorkers(admin, `?after=${unknown}`)).toEqual({
      status: 422,
      body: { detail: [{ type: 'value_error', loc: ['query', 'after'], msg: 'Value error, after is not the id of a worker', input: unknown }] },
      text: expect.any(String),
    });
    // A cursor whose worker went quiet while the client paged still says where the next page starts.
    await sql`update workers set last_seen_at = now() - interval '1 day' where id = ${first.body.last_id}`.execute(app.db);
    expect(await adminWorkers(admin, `?limit=2&after=${first.body.last_id}`)).toMatchObject({ status: 200 });
  });

  it('the lease sweep forgets workers not seen for a week', async () => {
    const user = await createUserWithKey(app);
    const headers = (await createWorkerKey(app, user.username)).headers;
    const [gone, kept] = [uniqueName('gone'), uniqueName('kept')];
    for (const workerId of [gone, kept]) await new ScriptedWorker(app, headers, ['none'], workerId).claim();
    await sql`update workers set last_seen_at = now() - interval '6 days' where worker_id = ${kept}`.execute(app.db);
    await sql`update workers set last_seen_at = now() - interval '8 days' where worker_id = ${gone}`.execute(app.db);
    const rows = async () => (await sql<{ worker_id: string }>`select worker_id from workers where worker_id in (${gone}, ${kept})`.execute(app.db)).rows;
    await vi.waitFor(async () => expect(await rows()).toHaveLength(1), { timeout: 10_000, interval: 50 });
    expect(await rows()).toEqual([{ worker_id: kept }]);
  });
});

describe.skipIf(!onPostgresServer)('concurrent claims on a PostgreSQL server', () => {
  it('two workers claiming at once never get the same job', async () => {
    const user = await createUserWithKey(app);
    const baseModel = `concurrent-${crypto.randomUUID()}`;
    const jobIds: string[] = [];
    for (let i = 0; i < 12; i++) {
      const model = await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'p', name: `m${i}`, base_model: baseModel });
      const job = await call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.body.id, trajectory_groups: [groupGenerationA()] });
      jobIds.push(job.body.id);
    }
    const workers = [await ScriptedWorker.create(app, user, [baseModel]), await ScriptedWorker.create(app, user, [baseModel])];
    const claims = await Promise.all(workers.flatMap((worker) => Array.from({ length: 10 }, () => worker.claim())));
    const claimed = claims.filter((c): c is ClaimedJob => c !== undefined).map((c) => c.job.id);
    expect(new Set(claimed).size).toBe(claimed.length);
    expect(claimed.sort()).toEqual([...jobIds].sort());
  });
});
