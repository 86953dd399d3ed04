import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { callItems, lines, post } from './helpers.js';

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('cost')}`;
const usage = (model: string, prompt: number, completion: number) => ({ usage: { [model]: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, requests: 1 } } });

describe('/cost/create, /cost/query, /cost/purge', () => {
  it('creates project prices and answers [cost_id, llm_id] pairs', async () => {
    const project = newProject();
    const response = await post(app, user, '/cost/create', {
      project_id: project,
      costs: { 'my-model': { prompt_token_cost: 0.01, completion_token_cost: 0.02 }, other: { prompt_token_cost: 1, completion_token_cost: 2, provider_id: 'acme', effective_date: '2024-01-01T00:00:00Z' } },
    });
    expect(response.statusCode, response.body).toBe(200);
    const ids = response.json().ids;
    expect(ids).toEqual([[expect.any(String), 'my-model'], [expect.any(String), 'other']]);
    const all = (await post(app, user, '/cost/query', { project_id: project, sort_by: [{ field: 'llm_id', direction: 'asc' }] })).json().results;
    expect(all).toEqual([
      {
        id: ids[0][0],
        llm_id: 'my-model',
        prompt_token_cost: 0.01,
        completion_token_cost: 0.02,
        prompt_token_cost_unit: 'USD',
        completion_token_cost_unit: 'USD',
        effective_date: expect.stringMatching(/Z$/),
        provider_id: 'default',
      },
      {
        id: ids[1][0],
        llm_id: 'other',
        prompt_token_cost: 1,
        completion_token_cost: 2,
        prompt_token_cost_unit: 'USD',
        completion_token_cost_unit: 'USD',
        effective_date: '2024-01-01T00:00:00.000000Z',
        provider_id: 'acme',
      },
    ]);
    const picked = await post(app, user, '/cost/query', { project_id: project, fields: ['llm_id', 'provider_id'], query: { $expr: { $eq: [{ $getField: 'llm_id' }, { $literal: 'other' }] } } });
    expect(picked.json()).toEqual({ results: [{ llm_id: 'other', provider_id: 'acme' }] });
  });

  it('lists neither the default table nor another project\'s prices', async () => {
    const project = newProject();
    await post(app, user, '/cost/create', { project_id: newProject(), costs: { 'gpt-4': { prompt_token_cost: 1, completion_token_cost: 1 } } });
    const response = await post(app, user, '/cost/query', { project_id: project, query: { $expr: { $eq: [{ $getField: 'llm_id' }, { $literal: 'gpt-4' }] } } });
    expect(response.json()).toEqual({ results: [] });
  });

  it('purges by ids only', async () => {
    const project = newProject();
    const ids = (await post(app, user, '/cost/create', { project_id: project, costs: { a: { prompt_token_cost: 1, completion_token_cost: 1 }, b: { prompt_token_cost: 1, completion_token_cost: 1 } } })).json().ids;
    const before = await databaseFingerprint(app);
    const refused = await post(app, user, '/cost/purge', { project_id: project, query: { $expr: { $eq: [{ $getField: 'llm_id' }, { $literal: 'a' }] } } });
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toEqual({ reason: 'Can only purge by specifying one or more cost ids' });
    expect(await databaseFingerprint(app)).toEqual(before);
    const purged = await post(app, user, '/cost/purge', { project_id: project, query: { $expr: { $eq: [{ $getField: 'id' }, { $literal: ids[0][0] }] } } });
    expect(purged.json()).toEqual({});
    const left = (await post(app, user, '/cost/query', { project_id: project, fields: ['llm_id'] })).json().results;
    expect(left).toEqual([{ llm_id: 'b' }]);
  });

  it('cannot purge the default prices', async () => {
    const project = newProject();
    await post(app, user, '/cost/purge', { project_id: project, query: { $expr: { $eq: [{ $getField: 'id' }, { $literal: 'default-0001' }] } } });
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', summary: usage('gpt-4', 1000, 0) }) });
    const [call] = (await post(app, user, '/calls/query', { project_id: project, include_costs: true })).json().calls;
    expect(call.summary.weave.costs['gpt-4'].pricing_level).toBe('default');
  });
});

describe('include_costs', () => {
  it('prices usage with the default table: gpt-4 at 3e-05 a prompt token, 2,000,000 tokens cost 60 USD', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', summary: usage('gpt-4', 2_000_000, 1000) }) });
    const [call] = (await post(app, user, '/calls/query', { project_id: project, include_costs: true })).json().calls;
    expect(call.summary.weave.costs).toEqual({
      'gpt-4': {
        prompt_tokens: 2_000_000,
        completion_tokens: 1000,
        requests: 1,
        total_tokens: 2_001_000,
        prompt_tokens_total_cost: 60,
        completion_tokens_total_cost: expect.closeTo(0.06, 10),
        prompt_token_cost: 3e-5,
        completion_token_cost: 6e-5,
        prompt_token_cost_unit: 'USD',
        completion_token_cost_unit: 'USD',
        effective_date: '2025-06-01T00:00:00.000000Z',
        provider_id: 'openai',
        pricing_level: 'default',
        pricing_level_id: 'default',
        created_at: expect.any(String),
        created_by: 'system',
      },
    });
    // Also on /call/read, and a model without any price gets no entry.
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'u', summary: usage('unpriced-model', 5, 5) }) });
    const read = (await post(app, user, '/call/read', { project_id: project, id: 'u', include_costs: true })).json().call;
    expect(read.summary.weave).not.toHaveProperty('costs');
  });

  it('adds input_tokens to prompt_tokens and output_tokens to completion_tokens', async () => {
    const project = newProject();
    await post(app, user, '/cost/create', { project_id: project, costs: { m: { prompt_token_cost: 1, completion_token_cost: 10, effective_date: '2000-01-01T00:00:00Z' } } });
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', summary: { usage: { m: { prompt_tokens: 1, input_tokens: 2, completion_tokens: 3, output_tokens: 4 } } } }) });
    const [call] = (await post(app, user, '/calls/query', { project_id: project, include_costs: true })).json().calls;
    expect(call.summary.weave.costs.m).toMatchObject({ prompt_tokens: 3, completion_tokens: 7, prompt_tokens_total_cost: 3, completion_tokens_total_cost: 70, requests: 0, total_tokens: 0 });
  });

  it('prefers a project price over the default, the latest in effect at the call\'s start, and a future price only when nothing is in effect', async () => {
    const project = newProject();
    await post(app, user, '/cost/create', { project_id: project, costs: { 'gpt-4o': { prompt_token_cost: 1, completion_token_cost: 1, effective_date: '2020-01-01T00:00:00Z' } } });
    await post(app, user, '/cost/create', { project_id: project, costs: { 'gpt-4o': { prompt_token_cost: 2, completion_token_cost: 2, effective_date: '2030-01-01T00:00:00Z' } } });
    await post(app, user, '/cost/create', { project_id: project, costs: { 'gpt-4o': { prompt_token_cost: 3, completion_token_cost: 3, effective_date: '2024-06-01T00:00:00Z' } } });
    await post(app, user, '/cost/create', { project_id: project, costs: { late: { prompt_token_cost: 7, completion_token_cost: 7, effective_date: '2031-01-01T00:00:00Z' } } });
    const batch = [
      ...callItems(project, { id: 'early', started_at: '2022-01-01T00:00:00Z', summary: usage('gpt-4o', 10, 0) }),
      ...callItems(project, { id: 'mid', started_at: '2025-01-01T00:00:00Z', summary: usage('gpt-4o', 10, 0) }),
      ...callItems(project, { id: 'later', started_at: '2030-06-01T00:00:00Z', summary: usage('gpt-4o', 10, 0) }),
      ...callItems(project, { id: 'future', started_at: '2025-01-01T00:00:01Z', summary: usage('late', 1, 0) }),
    ];
    await post(app, user, '/call/upsert_batch', { batch });
    const calls = (await post(app, user, '/calls/query', { project_id: project, include_costs: true })).json().calls as Record<string, any>[];
    const cost = (id: string, model: string) => calls.find((c) => c.id === id)!.summary.weave.costs[model];
    expect(cost('early', 'gpt-4o')).toMatchObject({ prompt_token_cost: 1, pricing_level: 'project', pricing_level_id: project });
    expect(cost('mid', 'gpt-4o')).toMatchObject({ prompt_token_cost: 3, pricing_level: 'project' });
    expect(cost('later', 'gpt-4o')).toMatchObject({ prompt_token_cost: 2, pricing_level: 'project' });
    expect(cost('future', 'late')).toMatchObject({ prompt_token_cost: 7, effective_date: '2031-01-01T00:00:00.000000Z' });
  });

  it('uses the default price for a call started before the project price took effect', async () => {
    const project = newProject();
    await post(app, user, '/cost/create', { project_id: project, costs: { 'gpt-4o-mini': { prompt_token_cost: 9, completion_token_cost: 9, effective_date: '2026-01-01T00:00:00Z' } } });
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', started_at: '2025-07-01T00:00:00Z', summary: usage('gpt-4o-mini', 1_000_000, 0) }) });
    const [call] = (await post(app, user, '/calls/query', { project_id: project, include_costs: true })).json().calls;
    expect(call.summary.weave.costs['gpt-4o-mini']).toMatchObject({ pricing_level: 'default', prompt_tokens_total_cost: expect.closeTo(0.15, 10) });
  });
});

describe('/threads/stream_query', () => {
  async function seedThreads(project: string) {
    const at = (s: number) => new Date(Date.UTC(2025, 0, 1, 0, 0, s)).toISOString();
    const turn = (id: string, thread: string, start: number, end: number | null) =>
      callItems(project, { id, thread_id: thread, turn_id: id, started_at: at(start), ended_at: end === null ? null : at(end) });
    await post(app, user, '/call/upsert_batch', {
      batch: [
        ...turn('a1', 'alpha', 0, 1),
        ...turn('a2', 'alpha', 10, 13),
        ...turn('a3', 'alpha', 20, 30),
        // a child call in a turn is not a turn
        ...callItems(project, { id: 'a1-child', thread_id: 'alpha', turn_id: 'a1', parent_id: 'a1', trace_id: 'a1', started_at: at(0), ended_at: at(50) }),
        ...turn('b1', 'beta', 5, 6),
        ...turn('b2', 'beta', 40, null),
        ...turn('g1', '', 1, 2),
        ...callItems(project, { id: 'none', started_at: at(3) }),
        ...turn('d1', 'deleted', 1, 2),
      ],
    });
    await post(app, user, '/calls/delete', { project_id: project, call_ids: ['d1'] });
  }

  it('aggregates turn calls per thread, newest update first', async () => {
    const project = newProject();
    await seedThreads(project);
    const response = await post(app, user, '/threads/stream_query', { project_id: project });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['content-type']).toContain('application/jsonl');
    expect(lines(response.body)).toEqual([
      {
        thread_id: 'beta',
        turn_count: 2,
        start_time: '2025-01-01T00:00:05.000000Z',
        last_updated: '2025-01-01T00:00:40.000000Z',
        first_turn_id: 'b1',
        last_turn_id: 'b2',
        p50_turn_duration_ms: 1000,
        p99_turn_duration_ms: 1000,
      },
      {
        thread_id: 'alpha',
        turn_count: 3,
        start_time: '2025-01-01T00:00:00.000000Z',
        last_updated: '2025-01-01T00:00:30.000000Z',
        first_turn_id: 'a1',
        last_turn_id: 'a3',
        p50_turn_duration_ms: 3000,
        p99_turn_duration_ms: expect.closeTo(9860, 6),
      },
    ]);
  });

  it('filters by thread ids and times, sorts, and pages', async () => {
    const project = newProject();
    await seedThreads(project);
    const query = async (body: Record<string, unknown>) => lines((await post(app, user, '/threads/stream_query', { project_id: project, ...body })).body).map((t) => t.thread_id);
    expect(await query({ filter: { thread_ids: ['alpha'] } })).toEqual(['alpha']);
    expect(await query({ filter: { after_datetime: '2025-01-01T00:00:01Z' } })).toEqual(['beta']);
    expect(await query({ filter: { before_datetime: '2025-01-01T00:00:35Z' } })).toEqual(['alpha']);
    expect(await query({ sort_by: [{ field: 'turn_count', direction: 'desc' }] })).toEqual(['alpha', 'beta']);
    expect(await query({ sort_by: [{ field: 'thread_id', direction: 'asc' }], limit: 1, offset: 1 })).toEqual(['beta']);
    expect(await query({ sort_by: [{ field: 'p50_turn_duration_ms', direction: 'asc' }] })).toEqual(['beta', 'alpha']);
  });

  it('refuses a sort field threads do not have', async () => {
    const response = await post(app, user, '/threads/stream_query', { project_id: newProject(), sort_by: [{ field: 'op_name', direction: 'asc' }] });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({
      reason: 'Invalid sort field "op_name" for threads: expected one of thread_id, turn_count, start_time, last_updated, p50_turn_duration_ms, p99_turn_duration_ms',
    });
  });

  it('answers an empty body for a project without threads', async () => {
    const response = await post(app, user, '/threads/stream_query', { project_id: newProject() });
    expect(response.statusCode).toBe(200);
    expect(response.body).toBe('');
  });
});
