import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { callItems, lines, post, tick, type CallSpec } from './helpers.js';

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('calls')}`;

async function ingest(project: string, specs: CallSpec[]): Promise<void> {
  const response = await post(app, user, '/call/upsert_batch', { batch: specs.flatMap((s) => callItems(project, s)) });
  expect(response.statusCode, response.body).toBe(200);
}

async function query(project: string, body: Record<string, unknown> = {}): Promise<Record<string, unknown>[]> {
  const response = await post(app, user, '/calls/stream_query', { project_id: project, ...body });
  expect(response.statusCode, response.body).toBe(200);
  return lines(response.body);
}

const ids = (calls: Record<string, unknown>[]) => calls.map((c) => c.id);

describe('call ingest', () => {
  it('merges start and end into a call with the derived summary.weave', async () => {
    const project = newProject();
    const started = '2025-03-01T10:00:00.123456Z';
    await ingest(project, [{ id: 'c1', started_at: started, ended_at: '2025-03-01T10:00:01.623456Z', inputs: { q: 'hi' }, output: { a: 1 }, summary: { usage: { m: { requests: 1 } } } }]);
    const { call } = (await post(app, user, '/call/read', { project_id: project, id: 'c1' })).json();
    expect(call).toEqual({
      id: 'c1',
      project_id: project,
      op_name: `weave:///${project}/op/predict:abc`,
      display_name: null,
      trace_id: 'c1',
      parent_id: null,
      thread_id: null,
      turn_id: null,
      started_at: started,
      attributes: {},
      inputs: { q: 'hi' },
      ended_at: '2025-03-01T10:00:01.623456Z',
      exception: null,
      output: { a: 1 },
      summary: { usage: { m: { requests: 1 } }, weave: { status: 'success', trace_name: 'predict', latency_ms: 1500 } },
      wb_user_id: expect.any(String),
      wb_run_id: null,
      wb_run_step: null,
      wb_run_step_end: null,
      deleted_at: null,
    });
  });

  it('keeps a ref too long to index in the payload only: the batch is stored and the other refs filter as before', async () => {
    const project = newProject();
    const short = `weave:///${project}/object/model:m1`;
    // 3,000 characters that do not compress: past what the refs columns' GIN index takes in one entry.
    const long = `weave:///${project}/object/${randomBytes(1500).toString('hex')}:d1`;
    await ingest(project, [{ id: 'r1', inputs: { long, short }, output: { long } }, { id: 'r2', inputs: { q: 1 } }]);
    const { call } = (await post(app, user, '/call/read', { project_id: project, id: 'r1' })).json();
    expect([call.inputs, call.output]).toEqual([{ long, short }, { long }]);
    expect(ids(await query(project, { filter: { input_refs: [short] } }))).toEqual(['r1']);
    expect(ids(await query(project))).toEqual(['r1', 'r2']);
  });

  it('keeps an end without its start invisible until the start arrives, then merges them', async () => {
    const project = newProject();
    const [start, end] = callItems(project, { id: 'late', output: 'done' });
    await post(app, user, '/call/upsert_batch', { batch: [end] });
    expect((await post(app, user, '/call/read', { project_id: project, id: 'late' })).json()).toEqual({ call: null });
    expect(await query(project)).toEqual([]);
    expect((await post(app, user, '/calls/query_stats', { project_id: project })).json()).toEqual({ count: 0 });
    await post(app, user, '/call/upsert_batch', { batch: [start] });
    const { call } = (await post(app, user, '/call/read', { project_id: project, id: 'late' })).json();
    expect(call).toMatchObject({ output: 'done', summary: { weave: { status: 'success' } } });
  });

  it('treats repeated starts and ends as idempotent, and reports running and error status', async () => {
    const project = newProject();
    const items = callItems(project, { id: 'dup', output: 1 });
    await post(app, user, '/call/upsert_batch', { batch: [...items, ...items] });
    await post(app, user, '/call/upsert_batch', { batch: items });
    await ingest(project, [{ id: 'run', ended_at: null }, { id: 'err', exception: 'boom' }, { id: 'desc', summary: { status_counts: { error: 2 } } }]);
    const calls = await query(project);
    expect(calls.map((c) => [c.id, (c.summary as { weave: { status: string } }).weave.status])).toEqual([
      ['dup', 'success'],
      ['run', 'running'],
      ['err', 'error'],
      ['desc', 'descendant_error'],
    ]);
    expect(calls[1].summary).toEqual({ weave: { status: 'running', trace_name: 'predict' } });
  });

  it('answers /call/start and /call/end singly, generating missing ids', async () => {
    const project = newProject();
    const started = await post(app, user, '/call/start', { start: { project_id: project, op_name: 'plain-op', started_at: tick(), attributes: {}, inputs: {} } });
    const { id, trace_id: traceId } = started.json();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(traceId).toMatch(/^[0-9a-f-]{36}$/);
    expect((await post(app, user, '/call/end', { end: { project_id: project, id, ended_at: tick(), summary: {}, output: 'x', display_name: 'extra field' } })).json()).toEqual({});
    const call = (await post(app, user, '/call/read', { project_id: project, id })).json().call;
    expect(call).toMatchObject({ op_name: 'plain-op', output: 'x', summary: { weave: { trace_name: 'extra field' } } });
  });

  it('sets and clears display names, "" reading as null, even before the start arrives', async () => {
    const project = newProject();
    expect((await post(app, user, '/call/update', { project_id: project, call_id: 'early', display_name: 'First' })).json()).toEqual({});
    await ingest(project, [{ id: 'early' }]);
    expect((await post(app, user, '/call/read', { project_id: project, id: 'early' })).json().call.display_name).toBe('First');
    await post(app, user, '/call/update', { project_id: project, call_id: 'early', display_name: '' });
    const call = (await post(app, user, '/call/read', { project_id: project, id: 'early' })).json().call;
    expect([call.display_name, call.summary.weave.trace_name]).toEqual([null, 'predict']);
    const none = await post(app, user, '/call/update', { project_id: project, call_id: 'early' });
    expect([none.statusCode, none.json()]).toEqual([400, { reason: 'Nothing to update: send display_name (the only updatable field; "" removes the name).' }]);
  });

  it('writes a batch all or nothing: an item the database refuses leaves the database unchanged', async () => {
    const project = newProject();
    // Validation leaves nothing the database refuses, so a trigger plays a refused value (a data exception)
    // on the batch's second call, after the first was written in the same transaction.
    await sql`create function refuse_op() returns trigger language plpgsql as $$
      begin if new.op_name = 'refused-op' then raise exception 'refused' using errcode = '22023'; end if; return new; end $$`.execute(app.db);
    await sql`create trigger refuse_op before insert or update on trace_calls for each row execute function refuse_op()`.execute(app.db);
    try {
      // A key's first use is recorded on the key: not the refused request's write.
      await post(app, user, '/calls/query_stats', { project_id: project });
      const before = await databaseFingerprint(app);
      const batch = [...callItems(project, { id: 'ok' }), ...callItems(project, { id: 'refused', op_name: 'refused-op' })];
      const response = await post(app, user, '/call/upsert_batch', { batch });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ reason: 'A value in the request is out of the range or form PostgreSQL accepts (SQLSTATE 22023).' });
      expect(await databaseFingerprint(app)).toEqual(before);
    } finally {
      await sql`drop trigger refuse_op on trace_calls`.execute(app.db);
      await sql`drop function refuse_op()`.execute(app.db);
    }
  });

  it('refuses an op name past 2,000 bytes of UTF-8 (it is indexed), though within 1,024 characters, naming it', async () => {
    const project = newProject();
    await post(app, user, '/calls/query_stats', { project_id: project });
    const before = await databaseFingerprint(app);
    // 1,024 random 3-byte characters: 3,072 bytes, which no compression brings under a btree entry's 2,704.
    const opName = String.fromCharCode(...Array.from(randomBytes(2048).subarray(0, 1024), (byte, i) => 0x4e00 + byte * 64 + (i % 64)));
    const batch = [...callItems(project, { id: 'ok' }), ...callItems(project, { id: 'long', op_name: opName })];
    const response = await post(app, user, '/call/upsert_batch', { batch });
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [
        { type: 'value_error', loc: ['body', 'batch', 2, 'req', 'start', 'op_name'], msg: 'Value error, op_name takes at most 2000 bytes of UTF-8', input: opName, ctx: { error: 'op_name takes at most 2000 bytes of UTF-8' } },
      ],
    });
    expect(await databaseFingerprint(app)).toEqual(before);
    // 666 such characters (1,998 bytes) are stored and read back.
    const fits = opName.slice(0, 666);
    expect((await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'fits', op_name: fits }) })).statusCode).toBe(200);
  });

  it('takes a 10 MB batch in one request', async () => {
    const project = newProject();
    const padding = 'x'.repeat(10_000);
    const specs = Array.from({ length: 1000 }, (_, i) => ({ id: `big-${i}`, inputs: { padding, i } }));
    const body = JSON.stringify({ batch: specs.flatMap((s) => callItems(project, s)) });
    expect(body.length).toBeGreaterThan(10_000_000);
    const response = await post(app, user, '/call/upsert_batch', body);
    expect(response.statusCode).toBe(200);
    expect(response.json().res).toHaveLength(2000);
    expect((await post(app, user, '/calls/query_stats', { project_id: project })).json()).toEqual({ count: 1000 });
  });
});

describe('calls delete', () => {
  it('cascades to descendants, hides them everywhere and refuses more than 1000 ids', async () => {
    const project = newProject();
    await ingest(project, [
      { id: 'root', trace_id: 't' },
      { id: 'child', trace_id: 't', parent_id: 'root' },
      { id: 'grandchild', trace_id: 't', parent_id: 'child' },
      { id: 'sibling', trace_id: 't2' },
    ]);
    expect((await post(app, user, '/calls/delete', { project_id: project, call_ids: ['child'] })).json()).toEqual({ num_deleted: 2 });
    expect(ids(await query(project))).toEqual(['root', 'sibling']);
    expect((await post(app, user, '/call/read', { project_id: project, id: 'grandchild' })).json()).toEqual({ call: null });
    expect((await post(app, user, '/calls/query_stats', { project_id: project })).json()).toEqual({ count: 2 });
    const tooMany = await post(app, user, '/calls/delete', { project_id: project, call_ids: Array.from({ length: 1001 }, (_, i) => `x${i}`) });
    expect([tooMany.statusCode, tooMany.json()]).toEqual([400, { reason: 'Cannot delete more than 1000 calls at once (got 1001); split the request.' }]);
  });
});

describe('calls queries over HTTP', () => {
  let project: string;

  beforeAll(async () => {
    project = newProject();
    const opRef = (name: string, digest = 'd1') => `weave:///${project}/op/${name}:${digest}`;
    const objRef = `weave:///${project}/object/model:m1`;
    await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'model', val: { temperature: 0.5, name: 'm' } } });
    const model = (await post(app, user, '/objs/query', { project_id: project, filter: { object_ids: ['model'] } })).json().objs[0];
    await ingest(project, [
      { id: 'a', trace_id: 'ta', op_name: opRef('outer'), inputs: { n: 10, tag: 'Alpha', model: `weave:///${project}/object/model:${model.digest}` }, output: { score: 0.9 }, attributes: { env: 'prod' }, thread_id: 'th1', turn_id: 'a' },
      { id: 'b', trace_id: 'ta', parent_id: 'a', op_name: opRef('inner', 'd2'), inputs: { n: 2, tag: 'beta' }, output: { score: 0.1 }, thread_id: 'th1' },
      { id: 'c', trace_id: 'tc', op_name: opRef('outer', 'd3'), inputs: { n: 'x', ref: objRef }, exception: 'boom', display_name: 'Named' },
      { id: 'd', trace_id: 'td', op_name: 'plain', inputs: {}, output: objRef },
    ]);
  });

  it('filters by op names with :* wildcards, roots, parents, traces, threads, turns and refs', async () => {
    const opName = (name: string, digest: string) => `weave:///${project}/op/${name}:${digest}`;
    expect(ids(await query(project, { filter: { op_names: [`weave:///${project}/op/outer:*`] } }))).toEqual(['a', 'c']);
    expect(ids(await query(project, { filter: { op_names: [opName('inner', 'd2'), 'plain'] } }))).toEqual(['b', 'd']);
    expect(ids(await query(project, { filter: { trace_roots_only: true } }))).toEqual(['a', 'c', 'd']);
    expect(ids(await query(project, { filter: { parent_ids: ['a'] } }))).toEqual(['b']);
    expect(ids(await query(project, { filter: { trace_ids: ['ta'] } }))).toEqual(['a', 'b']);
    expect(ids(await query(project, { filter: { thread_ids: ['th1'], turn_ids: ['a'] } }))).toEqual(['a']);
    expect(ids(await query(project, { filter: { call_ids: ['d', 'c'] } }))).toEqual(['c', 'd']);
    expect(ids(await query(project, { filter: { input_refs: [`weave:///${project}/object/model:m1`] } }))).toEqual(['c']);
    expect(ids(await query(project, { filter: { input_refs: [`weave:///${project}/object/model:*`] } }))).toEqual(['a', 'c']);
    expect(ids(await query(project, { filter: { output_refs: [`weave:///${project}/object/model:m1`] } }))).toEqual(['d']);
    expect(ids(await query(project, { filter: { op_names: [] } }))).toEqual(['a', 'b', 'c', 'd']);
  });

  it('evaluates the $expr language on JSON paths, columns and derived fields', async () => {
    const f = (path: string) => ({ $getField: path });
    const l = (value: unknown) => ({ $literal: value });
    const run = async (expr: unknown) => ids(await query(project, { query: { $expr: expr } }));
    expect(await run({ $gt: [f('inputs.n'), l(5)] })).toEqual(['a']);
    expect(await run({ $eq: [f('inputs.tag'), l('beta')] })).toEqual(['b']);
    expect(await run({ $contains: { input: f('inputs.tag'), substr: l('ALP'), case_insensitive: true } })).toEqual(['a']);
    expect(await run({ $in: [f('attributes.env'), [l('prod'), l('dev')]] })).toEqual(['a']);
    expect(await run({ $eq: [f('summary.weave.status'), l('error')] })).toEqual(['c']);
    expect(await run({ $eq: [f('summary.weave.trace_name'), l('inner')] })).toEqual(['b']);
    expect(await run({ $gte: [f('summary.weave.latency_ms'), l(250)] })).toEqual(['a', 'b', 'c', 'd']);
    expect(await run({ $and: [{ $not: [{ $eq: [f('inputs.tag'), l('Alpha')] }] }, { $lt: [{ $convert: { input: f('output.score'), to: 'double' } }, l(0.5)] }] })).toEqual(['b']);
    expect(await run({ $or: [{ $eq: [f('exception'), l('boom')] }, { $eq: [{ $convert: { input: f('inputs.ref'), to: 'exists' } }, l(true)] }] })).toEqual(['c']);
    expect(await run({ $lte: [f('started_at'), l(0)] })).toEqual([]);
  });

  it('sorts by JSON paths with missing values last, and pages', async () => {
    const sorted = await query(project, { sort_by: [{ field: 'output.score', direction: 'desc' }] });
    expect(ids(sorted)).toEqual(['a', 'b', 'c', 'd']);
    const asc = await query(project, { sort_by: [{ field: 'output.score', direction: 'asc' }], limit: 2, offset: 1 });
    expect(ids(asc)).toEqual(['a', 'c']);
    const nonStreaming = (await post(app, user, '/calls/query', { project_id: project, sort_by: [{ field: 'id', direction: 'desc' }], limit: 2 })).json();
    expect(ids(nonStreaming.calls)).toEqual(['d', 'c']);
  });

  it('reads keys holding dots through escaped dots in $getField, sort_by, feedback paths and table sorts, as weave does', async () => {
    const dotted = newProject();
    const usage = (total: number) => ({ usage: { 'Qwen/Qwen2.5-7B-Instruct': { total_tokens: total }, Qwen2: { '5-7B-Instruct': { total_tokens: 0 } } } });
    await ingest(dotted, [
      { id: 'x', summary: usage(10), inputs: { 'a.b': { c: 1 } } },
      { id: 'y', summary: usage(100), inputs: { 'a.b': { c: 3 } } },
      { id: 'z', summary: usage(40), inputs: { 'a.b': { c: 2 } } },
    ]);
    const tokens = String.raw`summary.usage.Qwen/Qwen2\.5-7B-Instruct.total_tokens`;
    const over30 = await query(dotted, { query: { $expr: { $gt: [{ $convert: { input: { $getField: tokens }, to: 'double' } }, { $literal: 30 }] } } });
    expect(ids(over30)).toEqual(['y', 'z']);
    expect(ids(await query(dotted, { sort_by: [{ field: tokens, direction: 'desc' }] }))).toEqual(['y', 'z', 'x']);
    expect(ids(await query(dotted, { sort_by: [{ field: String.raw`inputs.a\.b.c`, direction: 'asc' }] }))).toEqual(['x', 'z', 'y']);

    for (const [id, score] of [['x', 2], ['y', 1], ['z', 3]] as const) {
      const created = await post(app, user, '/feedback/create', { project_id: dotted, weave_ref: `weave:///${dotted}/call/${id}`, feedback_type: 'custom', payload: { 'score.v1': score } });
      expect(created.statusCode, created.body).toBe(200);
    }
    expect(ids(await query(dotted, { sort_by: [{ field: String.raw`feedback.[custom].payload.score\.v1`, direction: 'desc' }] }))).toEqual(['z', 'x', 'y']);

    const table = (await post(app, user, '/table/create', { table: { project_id: dotted, rows: [{ m: { 'a.b': 2 } }, { m: { 'a.b': 3 } }, { m: { 'a.b': 1 } }] } })).json();
    const rows = (await post(app, user, '/table/query', { project_id: dotted, digest: table.digest, sort_by: [{ field: String.raw`m.a\.b`, direction: 'asc' }] })).json().rows;
    expect(rows.map((r: { original_index: number }) => r.original_index)).toEqual([2, 0, 1]);
  });

  it('names the user of each call with include_usernames, even when the columns leave wb_user_id out', async () => {
    const named = newProject();
    await ingest(named, [{ id: 'u1' }, { id: 'u2' }]);
    const full = await query(named, { include_usernames: true });
    expect(full.map((c) => [c.id, c.wb_username])).toEqual([['u1', user.username], ['u2', user.username]]);
    const narrow = await query(named, { include_usernames: true, columns: ['id'] });
    expect(narrow.map((c) => c.wb_username)).toEqual([user.username, user.username]);
    expect((await query(named))[0]).not.toHaveProperty('wb_username');
  });

  it('projects columns and expands ref columns keeping _ref', async () => {
    const [call] = await query(project, { filter: { call_ids: ['a'] }, columns: ['inputs.n', 'summary'], expand_columns: ['inputs.model'] });
    expect(call.output).toBeNull();
    expect(call.attributes).toEqual({});
    expect((call.inputs as Record<string, unknown>).model).toEqual({ temperature: 0.5, name: 'm', _ref: expect.stringMatching(/^weave:\/\/\/.+\/object\/model:/) });
    expect((call.summary as Record<string, unknown>).weave).toMatchObject({ status: 'success' });
    const [narrow] = await query(project, { filter: { call_ids: ['a'] }, columns: ['id'] });
    expect(narrow).toMatchObject({ id: 'a', inputs: {}, output: null, summary: null, trace_id: 'ta' });
  });

  it('counts with query_stats, probing with limit and has_more', async () => {
    expect((await post(app, user, '/calls/query_stats', { project_id: project, filter: { trace_roots_only: true } })).json()).toEqual({ count: 3 });
    expect((await post(app, user, '/calls/query_stats', { project_id: project, limit: 1 })).json()).toEqual({ count: 1, has_more: true });
    expect((await post(app, user, '/calls/query_stats', { project_id: project, limit: 10 })).json()).toEqual({ count: 4, has_more: false });
    const sized = (await post(app, user, '/calls/query_stats', { project_id: project, include_total_storage_size: true })).json();
    expect(sized).toEqual({ count: 4, total_storage_size_bytes: expect.any(Number) });
    expect(sized.total_storage_size_bytes).toBeGreaterThan(0);
  });

  it('answers bad fields with 403, bad queries with 400, an empty result with an empty body', async () => {
    const badField = await post(app, user, '/calls/stream_query', { project_id: project, query: { $expr: { $eq: [{ $getField: 'nope' }, { $literal: 1 }] } } });
    expect([badField.statusCode, badField.json()]).toEqual([403, { reason: 'Invalid field "nope": not a column of calls' }]);
    const emptyAnd = await post(app, user, '/calls/stream_query', { project_id: project, query: { $expr: { $and: [] } } });
    expect([emptyAnd.statusCode, emptyAnd.json()]).toEqual([400, { reason: '$and needs at least one operand' }]);
    const badSort = await post(app, user, '/calls/stream_query', { project_id: project, sort_by: [{ field: 'id', direction: 'up' }] });
    expect([badSort.statusCode, badSort.json()]).toEqual([400, { reason: 'Invalid sort direction "up": expected asc or desc' }]);
    const empty = await post(app, user, '/calls/stream_query', { project_id: project, filter: { call_ids: ['none'] } });
    expect([empty.statusCode, empty.body, empty.headers['content-type']]).toEqual([200, '', 'application/jsonl']);
  });

  it('treats injection attempts in field paths and values as data and leaves the database unchanged', async () => {
    const before = await databaseFingerprint(app);
    const attempts = [
      { $eq: [{ $getField: "inputs.tag'; drop table trace_calls; --" }, { $literal: 'x' }] },
      { $eq: [{ $getField: 'inputs.tag' }, { $literal: "'; delete from trace_calls; --" }] },
      { $contains: { input: { $getField: 'inputs.tag' }, substr: { $literal: "%' or 1=1 --" } } },
      { $in: [{ $getField: 'op_name' }, [{ $literal: "x') or true or ('" }]] },
    ];
    for (const expr of attempts) {
      const response = await post(app, user, '/calls/stream_query', { project_id: project, query: { $expr: expr } });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.body).toBe('');
    }
    const badPath = await post(app, user, '/calls/stream_query', { project_id: project, sort_by: [{ field: 'inputs..x', direction: 'asc' }] });
    expect([badPath.statusCode, badPath.json()]).toEqual([403, { reason: 'Invalid field "inputs..x": bad path segment' }]);
    expect(await databaseFingerprint(app)).toEqual(before);
    expect(ids(await query(project))).toEqual(['a', 'b', 'c', 'd']);
  });
});
