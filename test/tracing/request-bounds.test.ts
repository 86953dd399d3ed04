import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { post } from './helpers.js';

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('bounds')}`;
  await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers }); // the key's first use is recorded now
});
afterAll(async () => {
  await app.close();
});

const many = <T>(n: number, item: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => item(i));

/** The 422 message of a list past its bound (the FastAPI wording the validation layer uses). */
const list = (max: number, got?: number) => (got === undefined ? expect.stringMatching(new RegExp(`^List should have at most ${max} items after validation, not \\d+$`)) : `List should have at most ${max} items after validation, not ${got}`);

/** A 422 whose one detail names `loc` with zod's too_big wording, and nothing written. */
async function expectTooBig(url: string, body: unknown, loc: (string | number)[], msg: string) {
  const before = await databaseFingerprint(app);
  const response = url.startsWith('/traces') ? await post(app, user, url.slice('/traces'.length), body) : await app.inject({ method: 'POST', url, headers: user.headers, payload: body as object });
  expect(response.statusCode, response.body.slice(0, 300)).toBe(422);
  const detail = response.json().detail;
  expect(detail).toHaveLength(1);
  expect(detail[0]).toMatchObject({ loc, msg });
  expect(await databaseFingerprint(app)).toEqual(before);
}

describe('tracing request bounds', () => {
  it('10,000 sort keys on /table/query answer 422 naming sort_by', async () => {
    await expectTooBig(
      '/traces/table/query',
      { project_id: project, digest: 'd', sort_by: many(10_000, (i) => ({ field: `f${i}`, direction: 'asc' })) },
      ['body', 'sort_by'],
      list(32),
    );
  });

  it('2,000 call ids in a calls filter answer 422 naming the list', async () => {
    await expectTooBig(
      '/traces/calls/stream_query',
      { project_id: project, filter: { call_ids: many(2000, (i) => `c${i}`) } },
      ['body', 'filter', 'call_ids'],
      list(1000),
    );
  });

  it('fields, columns and expand_columns past 500 entries answer 422 naming the field', async () => {
    const fields = many(501, (i) => `payload.f${i}`);
    await expectTooBig('/traces/feedback/query', { project_id: project, fields }, ['body', 'fields'], list(500));
    await expectTooBig('/traces/calls/stream_query', { project_id: project, columns: fields }, ['body', 'columns'], list(500));
    await expectTooBig(
      '/traces/calls/query_stats',
      { project_id: project, expand_columns: fields },
      ['body', 'expand_columns'],
      list(500),
    );
  });

  it('a $expr nested past 32 levels or with more than 2,000 operands answers 422 naming $expr', async () => {
    let deep: unknown = { $eq: [{ $getField: 'op_name' }, { $literal: 'x' }] };
    for (let i = 0; i < 40; i++) deep = { $not: [deep] };
    await expectTooBig('/traces/calls/stream_query', { project_id: project, query: { $expr: deep } }, ['body', 'query', '$expr'], 'Value error, the query nests 42 levels deep; at most 32');
    const wide = { $or: many(1000, () => ({ $eq: [{ $getField: 'op_name' }, { $literal: 'x' }] })) };
    await expectTooBig('/traces/calls/stream_query', { project_id: project, query: { $expr: wide } }, ['body', 'query', '$expr'], 'Value error, the query has 3001 operands; at most 2000');
  });

  it('an $in list past 1,000 values answers 422 naming it', async () => {
    const query = { $expr: { $in: [{ $getField: 'id' }, many(2000, (i) => ({ $literal: `c${i}` }))] } };
    await expectTooBig('/traces/calls/stream_query', { project_id: project, query }, ['body', 'query', '$expr', '$in', 1], list(1000, 2000));
  });

  it('a sort field or list id longer than 2,048 characters answers 422', async () => {
    await expectTooBig(
      '/traces/feedback/query',
      { project_id: project, sort_by: [{ field: 'x'.repeat(3000), direction: 'asc' }] },
      ['body', 'sort_by', 0, 'field'],
      'String should have at most 2048 characters',
    );
  });

  it('call ids past 256 characters and op or display names past 1,024 answer 422 naming the field', async () => {
    const start = (fields: Record<string, unknown>) => ({
      start: { project_id: project, op_name: 'op', started_at: '2026-01-01T00:00:00Z', attributes: {}, inputs: {}, ...fields },
    });
    const longId = 'i'.repeat(257);
    for (const field of ['id', 'trace_id', 'parent_id', 'thread_id', 'turn_id']) {
      await expectTooBig('/traces/call/start', start({ [field]: longId }), ['body', 'start', field], 'String should have at most 256 characters');
    }
    for (const field of ['op_name', 'display_name']) {
      await expectTooBig('/traces/call/start', start({ [field]: 'n'.repeat(1025) }), ['body', 'start', field], 'String should have at most 1024 characters');
    }
    // In a batch, the one long id refuses the whole batch, naming its place.
    const batch = [{ mode: 'start', req: start({ id: 'ok' }) }, { mode: 'start', req: start({ id: longId }) }];
    await expectTooBig('/traces/call/upsert_batch', { batch }, ['body', 'batch', 1, 'req', 'start', 'id'], 'String should have at most 256 characters');
    const ended = { project_id: project, id: longId, trace_id: 't', op_name: 'op', started_at: '2026-01-01T00:00:00Z', ended_at: '2026-01-01T00:00:01Z', attributes: {}, inputs: {}, summary: {} };
    await expectTooBig(`/traces/v2/${project}/calls/complete`, { batch: [ended] }, ['body', 'batch', 0, 'id'], 'String should have at most 256 characters');
  });

  it('ids, refs and digests past 2,048 characters in id lists and reads answer 422 naming the field', async () => {
    const long = 'x'.repeat(2049);
    const msg = 'String should have at most 2048 characters';
    await expectTooBig('/traces/calls/delete', { project_id: project, call_ids: ['a', long] }, ['body', 'call_ids', 1], msg);
    await expectTooBig('/traces/refs/read_batch', { refs: [long] }, ['body', 'refs', 0], msg);
    await expectTooBig('/traces/obj/delete', { project_id: project, object_id: 'o', digests: [long] }, ['body', 'digests', 0], msg);
    await expectTooBig('/traces/obj/read', { project_id: project, object_id: long, digest: 'latest' }, ['body', 'object_id'], msg);
    await expectTooBig('/traces/table/query', { project_id: project, digest: long }, ['body', 'digest'], msg);
    await expectTooBig('/traces/table/create_from_digests', { project_id: project, row_digests: [long] }, ['body', 'row_digests', 0], msg);
    await expectTooBig('/traces/feedback/create', { project_id: project, weave_ref: long, feedback_type: 'x', payload: {} }, ['body', 'weave_ref'], msg);
  });

  it('batches past 10,000 items answer 422 naming the batch', async () => {
    const costs = Object.fromEntries(many(10_001, (i) => [`m${i}`, { prompt_token_cost: 0, completion_token_cost: 0 }]));
    await expectTooBig('/traces/cost/create', { project_id: project, costs }, ['body', 'costs'], 'Value error, at most 10000 models in one request');
    const batch = many(10_001, (i) => ({ project_id: project, weave_ref: `weave:///${project}/call/c${i}`, feedback_type: 'x', payload: {} }));
    await expectTooBig('/traces/feedback/batch/create', { batch }, ['body', 'batch'], list(10000));
  });

  it('a GraphQL document past 100,000 characters answers 422', async () => {
    await expectTooBig('/graphql', { query: `query { viewer { username } } #${'x'.repeat(100_000)}` }, ['body', 'query'], 'String should have at most 100000 characters');
  });
});

describe('training request bounds', () => {
  it('a checkpoint delete of more than 100,000 steps answers 422 naming steps', async () => {
    const before = await databaseFingerprint(app);
    const response = await app.inject({
      method: 'DELETE',
      url: `/v1/preview/models/${crypto.randomUUID()}/checkpoints`,
      headers: user.headers,
      payload: { steps: many(100_001, (i) => i) },
    });
    expect(response.statusCode).toBe(422);
    expect(response.json().detail).toMatchObject([{ loc: ['body', 'steps'], msg: list(100_000, 100_001) }]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('a page cursor longer than 256 characters answers 422 naming after', async () => {
    const response = await app.inject({ method: 'GET', url: `/v1/preview/models?after=${'x'.repeat(300)}`, headers: user.headers });
    expect(response.statusCode).toBe(422);
    expect(response.json().detail).toMatchObject([{ loc: ['query', 'after'], msg: 'String should have at most 256 characters' }]);
  });

  it('a log call with more than 10,000 trajectory groups or 1,000 metrics answers 422 naming the field', async () => {
    const url = `/v1/preview/models/${crypto.randomUUID()}/log`;
    await expectTooBig(url, { split: 'train', trajectory_groups: many(10_001, () => ({})) }, ['body', 'trajectory_groups'], list(10000));
    const metrics = Object.fromEntries(many(1001, (i) => [`m${i}`, 1]));
    await expectTooBig(
      url,
      { split: 'train', trajectory_groups: [{ trajectories: [{ reward: 1, metrics }] }] },
      ['body', 'trajectory_groups', 0, 'trajectories', 0, 'metrics'],
      'Value error, at most 1000 metrics in one map',
    );
  });
});
