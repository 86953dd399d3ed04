import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import type { Principal } from '../../src/auth/principal.js';
import { UnprocessableError } from '../../src/errors.js';
import * as repo from '../../src/training/repository.js';
import { SftDataResolver } from '../../src/training/sft-data.js';
import { appWithUser, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { blockedOrSettled, onPostgresServer } from '../helpers/database.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { call, groupGenerationA, ScriptedWorker, userWithModel, type Reply } from './fixtures.js';

/**
 * Inputs the database cannot hold (NUL characters, numbers past int4, index keys past a row) are 422s
 * that name the field, never 500s; retried deletes, completed retries and overflowing metrics; and, on a
 * PostgreSQL server, the races between deleting a model and writing to it.
 */

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const get = (url: string, as: TestUser = user) => call(app, as.headers, 'GET', url);
const post = (url: string, body: unknown, as: TestUser = user) => call(app, as.headers, 'POST', url, body);
const del = (url: string, body?: unknown, as: TestUser = user) => call(app, as.headers, 'DELETE', url, body);

const nulInBody = (loc: (string | number)[]) => ({
  detail: [
    {
      type: 'string_nul',
      loc,
      msg: 'String should not contain the NUL character (\\u0000)',
      input: null,
      ctx: { error: 'PostgreSQL cannot store U+0000 in text' },
    },
  ],
});

const nulInQuery = (field: string, input: string) => ({
  detail: [
    {
      type: 'string_nul',
      loc: ['query', field],
      msg: 'String should not contain the NUL character (\\u0000)',
      input,
      ctx: { error: 'PostgreSQL cannot store U+0000 in text' },
    },
  ],
});

async function addCheckpoint(modelId: string, step: number, metrics: Record<string, number> = {}): Promise<void> {
  await sql`insert into checkpoints (id, model_id, step, uri, metrics) values (${crypto.randomUUID()}, ${modelId}, ${step}, ${`s3://c/${step}`}, ${JSON.stringify(metrics)}::jsonb)`.execute(app.db);
}

describe('NUL characters', () => {
  it('in a users\' request body are a 422 naming the field, and nothing is stored', async () => {
    const { model } = await userWithModel(app, user);
    const before = await databaseFingerprint(app);
    const group = { trajectories: [{ messages_and_choices: [{ role: 'user', content: 'a\u0000b' }], reward: 1 }] };
    expect(await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [group] })).toEqual({
      status: 422,
      body: nulInBody(['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices', 0, 'content']),
      text: expect.any(String),
    });
    expect((await post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [group] })).body).toEqual(
      nulInBody(['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices', 0, 'content']),
    );
    expect((await post(`/v1/preview/models/${model.id}/log`, { split: 'v\u0000', trajectory_groups: [] })).body).toEqual(nulInBody(['body', 'split']));
    expect((await post('/v1/preview/models', { project: 'p', name: 'n\u0000', base_model: 'b' })).body).toEqual(nulInBody(['body', 'name']));
    // a key holding NUL is named too (JSONB cannot hold it either)
    const keyed = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [{ metadata: { 'k\u0000': 1 } }] });
    expect(keyed.status).toBe(422);
    expect(keyed.body).toEqual(nulInBody(['body', 'trajectory_groups', 0, 'metadata', 'k\u0000']));
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('and lone UTF-16 surrogates in a body are a 422 naming the field, where they were stored as U+FFFD or refused unnamed', async () => {
    const { model } = await userWithModel(app, user);
    const before = await databaseFingerprint(app);
    const unicode = (loc: (string | number)[]) => ({
      detail: [
        {
          type: 'string_unicode',
          loc,
          msg: 'Input should be a valid string, unable to parse raw data as a unicode string',
          input: null,
          ctx: { error: 'a UTF-16 surrogate escape without its pair is not Unicode text, and PostgreSQL cannot store it' },
        },
      ],
    });
    expect((await post('/v1/preview/models', { project: 'p', name: 'sur', base_model: 'Qwen\ud800' })).body).toEqual(unicode(['body', 'base_model']));
    expect((await post(`/v1/preview/models/${model.id}/log`, { split: 'v\udc00', trajectory_groups: [] })).body).toEqual(unicode(['body', 'split']));
    const keyed = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [{ metadata: { 'k\ud83d': 1 } }] });
    expect([keyed.status, keyed.body]).toEqual([422, unicode(['body', 'trajectory_groups', 0, 'metadata', 'k\ud83d'])]);
    expect(await databaseFingerprint(app)).toEqual(before);
    // A pair is Unicode text: stored as sent.
    const paired = await post('/v1/preview/models', { project: 'p', name: 'pair', base_model: 'Qwen \ud83d\ude00' });
    expect([paired.status, paired.body.base_model]).toEqual([200, 'Qwen \ud83d\ude00']);
  });

  it('in a query string are a 422 naming the field', async () => {
    const { model } = await userWithModel(app, user);
    expect(await get('/v1/preview/models?project=p%00')).toEqual({ status: 422, body: nulInQuery('project', 'p\u0000'), text: expect.any(String) });
    expect((await get('/v1/preview/models?entity=%00')).body).toEqual(nulInQuery('entity', '\u0000'));
    expect((await get(`/v1/preview/models/${model.id}/metrics?split=val%00`)).body).toEqual(nulInQuery('split', 'val\u0000'));
    expect((await get(`/v1/preview/models/${model.id}/checkpoints?after=x%00`)).body).toEqual(nulInQuery('after', 'x\u0000'));
    expect((await get('/v1/preview/training-jobs?after=%00')).body).toEqual(nulInQuery('after', '\u0000'));
    // a path id holding NUL is no UUID: an unknown id, as documented
    expect(await get('/v1/preview/models/a%00b')).toMatchObject({ status: 404, body: { detail: 'model a\u0000b not found' } });
  });

  it('in a worker\'s request body are a 422 naming the field, and the job is unchanged', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const claimed = (await worker.claim())!;
    const before = await databaseFingerprint(app);
    expect((await worker.call('POST', '/v1/workers/claim', { worker_id: 'w\u0000' })).body).toEqual(nulInBody(['body', 'worker_id']));
    const jobUrl = `/v1/workers/jobs/${claimed.job.id}`;
    expect(
      (await worker.call('POST', `${jobUrl}/fail`, { lease_token: claimed.lease.token, error_message: 'oom\u0000', retryable: true })).body,
    ).toEqual(nulInBody(['body', 'error_message']));
    expect(
      (await worker.call('POST', `${jobUrl}/complete`, { lease_token: claimed.lease.token, checkpoint: { uri: 's3://x\u0000', metrics: {} } })).body,
    ).toEqual(nulInBody(['body', 'checkpoint', 'uri']));
    expect(await databaseFingerprint(app)).toEqual(before);
    expect((await worker.complete(claimed)).status).toBe(200);
  });
});

describe('bounds of the database\'s columns', () => {
  it('a step past int4 (or below 0) is a 422 on that step; the largest int4 is a step not found', async () => {
    const { model } = await userWithModel(app, user);
    const url = `/v1/preview/models/${model.id}/checkpoints`;
    expect(await del(url, { steps: [1, 2147483648] })).toEqual({
      status: 422,
      body: {
        detail: [
          {
            type: 'less_than_equal',
            loc: ['body', 'steps', 1],
            msg: 'Input should be less than or equal to 2147483647',
            input: 2147483648,
            ctx: { le: 2147483647 },
          },
        ],
      },
      text: expect.any(String),
    });
    expect((await del(url, { steps: [-1] })).body).toEqual({
      detail: [{ type: 'greater_than_equal', loc: ['body', 'steps', 0], msg: 'Input should be greater than or equal to 0', input: -1, ctx: { ge: 0 } }],
    });
    expect(await del(url, { steps: [2147483647] })).toMatchObject({ status: 200, body: { deleted_count: 0, not_found_steps: [2147483647] } });
  });

  it('a checkpoint delete takes up to 100,000 steps (ART names every step but the latest and the best)', async () => {
    const { model } = await userWithModel(app, user);
    for (const step of [1, 2, 3]) await addCheckpoint(model.id, step);
    const url = `/v1/preview/models/${model.id}/checkpoints`;
    const steps = Array.from({ length: 100_000 }, (_, i) => i).filter((step) => step !== 3);
    steps.push(100_000);
    const reply = await del(url, { steps });
    expect(reply.status, reply.text.slice(0, 500)).toBe(200);
    expect(reply.body).toEqual({ deleted_count: 2, not_found_steps: steps.filter((step) => step !== 1 && step !== 2), pinned_steps: [], in_use_steps: [] });
    expect((await get(`${url}?limit=100`)).body.data.map((c: { step: number }) => c.step)).toEqual([3]);
    const tooMany = await del(url, { steps: [...steps, 100_001] });
    expect(tooMany.status).toBe(422);
    expect(tooMany.body.detail).toMatchObject([
      { type: 'too_long', loc: ['body', 'steps'], msg: 'List should have at most 100000 items after validation, not 100001', ctx: { field_type: 'List', max_length: 100000, actual_length: 100001 } },
    ]);
  });

  it('names and splits are at most 128 characters (a 422 rather than an index row too large)', async () => {
    const { model } = await userWithModel(app, user);
    const long = 'x'.repeat(2000); // short enough to come back whole as the input
    const tooLong = (loc: (string | number)[], input: string) => ({
      detail: [{ type: 'string_too_long', loc, msg: 'String should have at most 128 characters', input, ctx: { max_length: 128 } }],
    });
    const before = await databaseFingerprint(app);
    expect(await post('/v1/preview/models', { project: 'p', name: long, base_model: 'b' })).toEqual({
      status: 422,
      body: tooLong(['body', 'name'], long),
      text: expect.any(String),
    });
    expect((await post('/v1/preview/models', { project: long, name: 'n', base_model: 'b' })).body).toEqual(tooLong(['body', 'project'], long));
    expect((await post('/v1/preview/models', { entity: long, project: 'p', name: 'n', base_model: 'b' })).body).toEqual(tooLong(['body', 'entity'], long));
    expect((await post(`/v1/preview/models/${model.id}/log`, { split: 's'.repeat(129), trajectory_groups: [] })).body).toEqual(
      tooLong(['body', 'split'], 's'.repeat(129)),
    );
    expect((await get(`/v1/preview/models?project=${'p'.repeat(129)}`)).body).toEqual(tooLong(['query', 'project'], 'p'.repeat(129)));
    expect(await databaseFingerprint(app)).toEqual(before);
    const name = `${uniqueName('m')}-`.padEnd(128, 'n');
    expect(await post('/v1/preview/models', { project: 'p'.repeat(128), name, base_model: 'b' })).toMatchObject({ status: 200, body: { name } });
    expect((await post(`/v1/preview/models/${model.id}/log`, { split: 's'.repeat(128), trajectory_groups: [] })).status).toBe(200);
  });

  it('a base model is at most 512 characters, the longest name a worker\'s claim filters on', async () => {
    const before = await databaseFingerprint(app);
    const long = 'b'.repeat(513);
    expect(await post('/v1/preview/models', { project: 'p', name: uniqueName('m'), base_model: long })).toEqual({
      status: 422,
      body: { detail: [{ type: 'string_too_long', loc: ['body', 'base_model'], msg: 'String should have at most 512 characters', input: long, ctx: { max_length: 512 } }] },
      text: expect.any(String),
    });
    expect(await databaseFingerprint(app)).toEqual(before);
    const longest = 'b'.repeat(512);
    expect(await post('/v1/preview/models', { project: 'p', name: uniqueName('m'), base_model: longest })).toMatchObject({ status: 200, body: { base_model: longest } });
  });

  it('an SFT data URL is at most 4,096 characters, and the 422 echoes only the start of a longer one', async () => {
    const { model } = await userWithModel(app, user);
    const url = `weave:///${user.entity}/datasets/object/${'d'.repeat(3_000_000)}`;
    const before = await databaseFingerprint(app);
    for (const field of ['training_data_url', 'training_folder_url']) {
      const reply = await post('/v1/preview/sft-training-jobs', { model_id: model.id, [field]: url });
      expect(reply, field).toEqual({
        status: 422,
        body: {
          detail: [
            { type: 'string_too_long', loc: ['body', field], msg: 'String should have at most 4096 characters', input: `${JSON.stringify(url).slice(0, 2048)}…`, ctx: { max_length: 4096 } },
          ],
        },
        text: expect.any(String),
      });
      expect(reply.text.length, field).toBeLessThan(3000);
    }
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('a trajectory\'s exchanges lists and metadata maps are bounded (100,000 items, 10,000 keys)', async () => {
    const { model } = await userWithModel(app, user);
    const group = (trajectory: Record<string, unknown>) => ({ trajectories: [{ messages_and_choices: [], reward: 1, ...trajectory }] });
    const before = await databaseFingerprint(app);
    const exchanges = await post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [group({ exchanges: { responses: new Array(100_001).fill(0) } })] });
    expect(exchanges.status).toBe(422);
    expect(exchanges.body.detail).toEqual([
      {
        type: 'too_long',
        loc: ['body', 'trajectory_groups', 0, 'trajectories', 0, 'exchanges', 'responses'],
        msg: 'List should have at most 100000 items after validation, not 100001',
        input: expect.any(String),
        ctx: { field_type: 'List', max_length: 100000, actual_length: 100001 },
      },
    ]);
    const metadata = Object.fromEntries(Array.from({ length: 10_001 }, (_, i) => [`k${i}`, i]));
    const tooManyKeys = await post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [{ ...group({ metadata }) }] });
    expect(tooManyKeys.status).toBe(422);
    expect(tooManyKeys.body.detail).toMatchObject([
      { type: 'value_error', loc: ['body', 'trajectory_groups', 0, 'trajectories', 0, 'metadata'], msg: 'Value error, at most 10000 keys in one metadata map' },
    ]);
    const groupKeys = await post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [{ ...group({}), metadata }] });
    expect(groupKeys.body.detail).toMatchObject([{ type: 'value_error', loc: ['body', 'trajectory_groups', 0, 'metadata'], msg: 'Value error, at most 10000 keys in one metadata map' }]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('an SFT ref whose version number is past int4 is a 422 like any ref that names nothing', async () => {
    const { model } = await userWithModel(app, user);
    const url = `weave:///${user.entity}/datasets/object/data:v99999999999999999999`;
    const before = await databaseFingerprint(app);
    expect(await post('/v1/preview/sft-training-jobs', { model_id: model.id, training_data_url: url })).toEqual({
      status: 422,
      body: {
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'training_data_url'],
            msg: `Value error, training_data_url ${url} cannot be used: Obj data:v99999999999999999999 not found in ${user.entity}/datasets`,
            input: url,
            ctx: { error: `Obj data:v99999999999999999999 not found in ${user.entity}/datasets` },
          },
        ],
      },
      text: expect.any(String),
    });
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});

describe('SFT refs the database refuses', () => {
  it('a data exception while resolving a ref is the 422 of a ref that names nothing, not a 500', async () => {
    const resolver = new SftDataResolver({
      resolveTracingRows: async () => {
        throw Object.assign(new Error('value "99999999999999999999" is out of range for type integer'), { code: '22003' });
      },
      allowHttpUrls: false,
      maxHttpBytes: 1024,
    });
    const url = 'weave:///e/p/object/x:v1';
    const error = await resolver.resolve({ entities: new Set(['e']) } as unknown as Principal, url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnprocessableError);
    expect(error).toMatchObject({
      message: `Value error, training_data_url ${url} cannot be used: it names nothing that can exist (a part of it is out of range)`,
      loc: ['body', 'training_data_url'],
    });
  });
});

describe('deleting a model again', () => {
  it('answers as the first delete did, with nothing deleted; another entity\'s deleted model stays a 404', async () => {
    const { model } = await userWithModel(app, user);
    await addCheckpoint(model.id, 1);
    const url = `/v1/preview/models/${model.id}`;
    expect(await del(url)).toMatchObject({ status: 200, body: { model_id: model.id, deleted_checkpoints: 1, deleted_run: true } });
    const heard: unknown[] = [];
    const listener = (event: unknown) => heard.push(event);
    app.events.on('checkpoints-deleted', listener);
    const before = await databaseFingerprint(app);
    const again = await del(url);
    app.events.off('checkpoints-deleted', listener);
    expect(again).toEqual({ status: 200, body: { model_id: model.id, deleted_checkpoints: 0, deleted_run: true }, text: expect.any(String) });
    expect(heard).toEqual([]);
    expect(await databaseFingerprint(app)).toEqual(before);
    // the model itself stays gone
    expect(await get(url)).toMatchObject({ status: 404, body: { detail: `model ${model.id} not found` } });
    const stranger = await createUserWithKey(app);
    expect(await del(url, undefined, stranger)).toEqual({ status: 404, body: { detail: `model ${model.id} not found` }, text: expect.any(String) });
    const unknown = crypto.randomUUID();
    expect((await del(`/v1/preview/models/${unknown}`)).body).toEqual({ detail: `model ${unknown} not found` });
  });
});

describe('a job completed on a retry', () => {
  it('has no error_message left from the failed attempt', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const created = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const first = (await worker.claim())!;
    expect((await worker.fail(first, 'CUDA out of memory', true)).body.job).toMatchObject({ status: 'QUEUED', attempt: 2, error_message: 'CUDA out of memory' });
    const second = (await worker.claim())!;
    const completed = await worker.complete(second);
    expect(completed.body.job.error_message).toBeNull();
    expect((await get(`/v1/preview/training-jobs/${created.body.id}`)).body).toEqual({
      id: created.body.id,
      model_id: model.id,
      kind: 'rl',
      status: 'COMPLETED',
      created_at: expect.any(String),
      training_start: expect.any(String),
      training_end: expect.any(String),
      error_message: null,
      attempt: 2,
      base_step: 0,
      target_step: 1,
      cancel_requested: false,
    });
  });
});

describe('log metrics that overflow', () => {
  it('are left out of the answer, the history and the checkpoint, not stored as null', async () => {
    const { model } = await userWithModel(app, user);
    await addCheckpoint(model.id, 1, { 'loss/train': 0.5 });
    const groups = [{ trajectories: [{ reward: 1e308 }, { reward: 1e308 }] }];
    const expected = {
      'val/exception_rate': 0,
      'data/step_num_scenarios': 1,
      'data/step_num_trajectories': 2,
      'data/step_num_groups_submitted': 1,
    };
    expect(await post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: groups })).toEqual({
      status: 200,
      body: { step: 1, metrics: expected },
      text: expect.any(String),
    });
    expect((await get(`/v1/preview/models/${model.id}/checkpoints`)).body.data).toEqual([
      { id: expect.any(String), step: 1, metrics: { 'loss/train': 0.5, ...expected } },
    ]);
    expect((await get(`/v1/preview/models/${model.id}/metrics`)).body.data).toEqual([
      { id: expect.any(String), step: 1, split: 'val', metrics: expected, created_at: expect.any(String) },
    ]);
  });
});

/**
 * Races with a delete of the model, on a PostgreSQL server (PGlite has one connection, so nothing runs
 * concurrently there). One side runs in a transaction the test holds open; the other is a request that
 * must wait for it.
 */
describe.skipIf(!onPostgresServer)('deleting a model while it is written to (PostgreSQL)', () => {
  async function scopeOf(owner: TestUser): Promise<repo.EntityScope> {
    return { entityIds: [...(await repo.findEntityIds(app.db, { names: [owner.entity] })).values()] };
  }

  it('a job or log created while the delete is in flight waits for it, then finds no model (404)', async () => {
    for (const write of ['job', 'log'] as const) {
      const { model } = await userWithModel(app, user);
      const scope = await scopeOf(user);
      let request: Promise<Reply> | undefined;
      await app.db.transaction().execute(async (trx) => {
        const locked = await repo.findModel(trx, { ...scope, modelId: model.id, lock: 'delete' });
        await repo.deleteModel(trx, { model: locked! });
        request =
          write === 'job'
            ? post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] })
            : post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [groupGenerationA()] });
        await blockedOrSettled(app.db, request);
      });
      expect(await request!, write).toEqual({ status: 404, body: { detail: `model ${model.id} not found` }, text: expect.any(String) });
      const left = await sql<{ jobs: number; logs: number }>`select
        (select count(*)::int from training_jobs where model_id = ${model.id} and status = 'QUEUED') as jobs,
        (select count(*)::int from trajectory_logs where model_id = ${model.id}) as logs`.execute(app.db);
      expect(left.rows[0], write).toEqual({ jobs: 0, logs: 0 });
    }
  });

  it('a checkpoint completed while the delete is in flight is deleted and reported with the rest', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const claimed = (await worker.claim())!;
    const heard: unknown[] = [];
    const listener = (event: unknown) => heard.push(event);
    app.events.on('checkpoints-deleted', listener);
    let deleting: Promise<Reply> | undefined;
    try {
      await app.db.transaction().execute(async (trx) => {
        const done = await repo.completeJob(trx, { jobId: claimed.job.id, leaseToken: claimed.lease.token, uri: 's3://late/1', metrics: {} });
        expect(done.outcome).toBe('completed');
        deleting = del(`/v1/preview/models/${model.id}`);
        expect(await blockedOrSettled(app.db, deleting)).toBe('blocked');
      });
      expect(await deleting!).toEqual({ status: 200, body: { model_id: model.id, deleted_checkpoints: 1, deleted_run: true }, text: expect.any(String) });
    } finally {
      app.events.off('checkpoints-deleted', listener);
    }
    expect(heard).toEqual([{ entity: user.entity, project: 'proj', model: model.name, steps: [1], uris: ['s3://late/1'], ids: [expect.stringMatching(/^[0-9a-f-]{36}$/)] }]);
    const left = await sql<{ n: number }>`select count(*)::int as n from checkpoints where model_id = ${model.id}`.execute(app.db);
    expect(left.rows[0].n).toBe(0);
  });

  it('a job requeued by a retryable failure while the delete is in flight ends CANCELED, not QUEUED', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const created = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    expect(created.status, created.text).toBe(200);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const claimed = (await worker.claim())!;
    let deleting: Promise<Reply> | undefined;
    // The failure holds the job row and requeues it; the delete waits for that row and must then cancel
    // what it finds QUEUED (two statements, queued then running, let it slip between them).
    await app.db.transaction().execute(async (trx) => {
      const requeued = await repo.failJob(trx, { jobId: claimed.job.id, leaseToken: claimed.lease.token, errorMessage: 'CUDA out of memory', retryable: true });
      expect(requeued).toMatchObject({ status: 'QUEUED', attempt: 2 });
      deleting = del(`/v1/preview/models/${model.id}`);
      expect(await blockedOrSettled(app.db, deleting)).toBe('blocked');
    });
    expect(await deleting!).toEqual({ status: 200, body: { model_id: model.id, deleted_checkpoints: 0, deleted_run: true }, text: expect.any(String) });
    const job = await sql<{ status: string; error_message: string }>`select status, error_message from training_jobs where id = ${claimed.job.id}`.execute(app.db);
    expect(job.rows).toEqual([{ status: 'CANCELED', error_message: 'training job was canceled' }]);
    const events = await sql<{ type: string }>`select type from job_events where job_id = ${claimed.job.id} order by seq`.execute(app.db);
    expect(events.rows.map((e) => e.type)).toEqual(['training_failed']);
  });
});
