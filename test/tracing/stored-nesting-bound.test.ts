import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { call, groupGenerationA, ScriptedWorker, userWithModel } from '../training/fixtures.js';
import { callItems, lines, post } from './helpers.js';

/**
 * What a write accepts, every read returns: client JSON nested up to 256 levels is stored and read back
 * by every listing; one level more is a 422 at write naming the field, and nothing is stored. Before the
 * bound, a value 3,000 levels deep was stored and then made every listing of its project answer 422.
 */

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const BOUND = 256;
const TOO_DEEP = 'Value error, the value nests more than 256 levels of objects and arrays, the most that is stored; flatten it or send it as a string';

/** A JSON value that nests exactly `levels` objects and arrays (alternating), around the string 'leaf'. */
function nested(levels: number): unknown {
  let value: unknown = 'leaf';
  for (let i = 0; i < levels; i++) value = i % 2 === 0 ? [value] : { d: value };
  return value;
}

/** An object value (for fields that must be objects) nesting exactly `levels` levels. */
const nestedObject = (levels: number) => ({ d: nested(levels - 1) });

const newProject = () => `${user.entity}/${uniqueName('deep')}`;

/** A 422 whose one detail is the nesting bound at `loc`, and nothing stored. */
async function expectRefused(send: () => Promise<{ statusCode: number; body: string }>, loc: (string | number)[]) {
  const before = await databaseFingerprint(app);
  const response = await send();
  expect(response.statusCode, response.body.slice(0, 300)).toBe(422);
  const detail = JSON.parse(response.body).detail;
  expect(detail).toHaveLength(1);
  expect(detail[0]).toMatchObject({ type: 'value_error', loc, msg: TOO_DEEP, ctx: { error: TOO_DEEP.slice('Value error, '.length), max_depth: BOUND } });
  expect(await databaseFingerprint(app)).toEqual(before);
}

describe('calls', () => {
  it('store inputs, attributes, output and summary nested at the bound, and every call reader returns them', async () => {
    const project = newProject();
    const deep = nestedObject(BOUND);
    const items = callItems(project, { id: 'c1', inputs: deep, attributes: deep, output: nested(BOUND), summary: deep });
    const written = await post(app, user, '/call/upsert_batch', { batch: items });
    expect(written.statusCode, written.body.slice(0, 300)).toBe(200);

    const query = await post(app, user, '/calls/query', { project_id: project });
    expect(query.statusCode, query.body.slice(0, 300)).toBe(200);
    const [found] = query.json().calls;
    expect([found.inputs, found.attributes, found.output]).toEqual([deep, deep, nested(BOUND)]);
    expect(found.summary.d).toEqual(deep.d);
    const stream = await post(app, user, '/calls/stream_query', { project_id: project, include_costs: true, include_feedback: true });
    expect(lines(stream.body).map((c) => c.inputs)).toEqual([deep]);
    const read = await post(app, user, '/call/read', { project_id: project, id: 'c1' });
    expect(read.json().call.output).toEqual(nested(BOUND));
    const stats = await post(app, user, '/calls/query_stats', { project_id: project });
    expect(stats.json()).toMatchObject({ count: 1 });
  });

  it('refuse inputs one level past the bound on call/start, naming the field', async () => {
    const start = { project_id: newProject(), op_name: 'op', started_at: '2025-01-01T00:00:00Z', attributes: {}, inputs: nestedObject(BOUND + 1) };
    await expectRefused(() => post(app, user, '/call/start', { start }), ['body', 'start', 'inputs']);
  });

  it('refuse the 3,000-level value that used to break the project\'s listings, and the listing still answers', async () => {
    const project = newProject();
    const start = { project_id: project, op_name: 'op', started_at: '2025-01-01T00:00:00Z', attributes: {}, inputs: nestedObject(3000) };
    await expectRefused(() => post(app, user, '/call/start', { start }), ['body', 'start', 'inputs']);
    const query = await post(app, user, '/calls/query', { project_id: project });
    expect([query.statusCode, query.json()]).toEqual([200, { calls: [] }]);
  });

  it('refuse an output past the bound in an upsert batch and a v2 batch, naming the item', async () => {
    const project = newProject();
    const [start, end] = callItems(project, { id: 'c2', output: nested(BOUND + 1) }) as [unknown, { req: { end: Record<string, unknown> } }];
    await expectRefused(() => post(app, user, '/call/upsert_batch', { batch: [start, end] }), ['body', 'batch', 1, 'req', 'end', 'output']);
    const complete = { project_id: project, id: 'c3', trace_id: 't3', op_name: 'op', started_at: '2025-01-01T00:00:00Z', ended_at: '2025-01-01T00:00:01Z', attributes: {}, inputs: {}, summary: nestedObject(BOUND + 1) };
    await expectRefused(() => post(app, user, `/v2/${project}/calls/complete`, { batch: [complete] }), ['body', 'batch', 0, 'summary']);
  });
});

describe('feedback', () => {
  it('stores a payload nested at the bound that feedback/query returns, and refuses one past it', async () => {
    const project = newProject();
    const feedback = { project_id: project, weave_ref: `weave:///${project}/call/c1`, feedback_type: 'custom' };
    const created = await post(app, user, '/feedback/create', { ...feedback, payload: nestedObject(BOUND) });
    expect(created.statusCode, created.body.slice(0, 300)).toBe(200);
    const query = await post(app, user, '/feedback/query', { project_id: project });
    expect(query.json().result.map((row: { payload: unknown }) => row.payload)).toEqual([nestedObject(BOUND)]);
    await expectRefused(() => post(app, user, '/feedback/create', { ...feedback, payload: nestedObject(BOUND + 1) }), ['body', 'payload']);
    await expectRefused(() => post(app, user, '/feedback/batch/create', { batch: [{ ...feedback, payload: nestedObject(BOUND + 1) }] }), ['body', 'batch', 0, 'payload']);
  });
});

describe('objects and tables', () => {
  it('store values and rows nested at the bound that obj/read, objs/query, table/query and refs return', async () => {
    const project = newProject();
    const created = await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'deep', val: nestedObject(BOUND) } });
    expect(created.statusCode, created.body.slice(0, 300)).toBe(200);
    const { digest } = created.json();
    expect((await post(app, user, '/obj/read', { project_id: project, object_id: 'deep', digest })).json().obj.val).toEqual(nestedObject(BOUND));
    expect((await post(app, user, '/objs/query', { project_id: project })).json().objs.map((o: { val: unknown }) => o.val)).toEqual([nestedObject(BOUND)]);
    expect((await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/object/deep:${digest}`] })).json().vals).toEqual([nestedObject(BOUND)]);

    const table = await post(app, user, '/table/create', { table: { project_id: project, rows: [nestedObject(BOUND)] } });
    expect(table.statusCode, table.body.slice(0, 300)).toBe(200);
    const rows = await post(app, user, '/table/query', { project_id: project, digest: table.json().digest });
    expect(rows.json().rows.map((r: { val: unknown }) => r.val)).toEqual([nestedObject(BOUND)]);
  });

  it('refuse values and rows past the bound, naming the field', async () => {
    const project = newProject();
    await expectRefused(() => post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'deep', val: nestedObject(BOUND + 1) } }), ['body', 'obj', 'val']);
    await expectRefused(() => post(app, user, '/table/create', { table: { project_id: project, rows: [{}, nestedObject(BOUND + 1)] } }), ['body', 'table', 'rows', 1]);
    const table = await post(app, user, '/table/create', { table: { project_id: project, rows: [{}] } });
    const update = { project_id: project, base_digest: table.json().digest, updates: [{ append: { row: nestedObject(BOUND + 1) } }] };
    const before = await databaseFingerprint(app);
    const response = await post(app, user, '/table/update', update);
    expect(response.statusCode).toBe(422);
    // The update is a union of three shapes; the closest one (append) reports the row.
    expect(response.json().detail).toEqual([expect.objectContaining({ loc: ['body', 'updates', 0, 'append', 'row'], msg: TOO_DEEP })]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});

describe('OTLP spans', () => {
  /** An OTLP `input` attribute: kvlists nested `levels` deep around the double 1 (stored as the float 1.0, no level). */
  const kvlist = (levels: number): unknown => {
    let value: unknown = { doubleValue: 1 };
    for (let i = 0; i < levels; i++) value = { kvlistValue: { values: [{ key: 'd', value }] } };
    return value;
  };
  const span = (spanId: string, inputLevels: number) => ({
    traceId: '5b8efff798038103d269b633813fc60c',
    spanId,
    name: `input ${inputLevels} deep`,
    kind: 1,
    startTimeUnixNano: '1735689600000000000',
    endTimeUnixNano: '1735689601000000000',
    attributes: [{ key: 'input', value: kvlist(inputLevels) }],
  });

  it('store a span whose stored form is at the bound, and reject the span one level deeper as partial success', async () => {
    const project = newProject();
    // The stored span (otel_dump) holds the attribute two levels down: an input of 254 levels is a dump of 256.
    const body = { resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans: [span('b7ad6b7169203331', BOUND - 2), span('b7ad6b7169203332', BOUND - 1)] }] }] };
    const response = await app.inject({ method: 'POST', url: '/traces/otel/v1/traces', headers: { authorization: user.headers.authorization, 'content-type': 'application/json', project_id: project }, payload: JSON.stringify(body) });
    expect(response.statusCode, response.body.slice(0, 300)).toBe(200);
    expect(response.json()).toEqual({
      partialSuccess: { rejectedSpans: 1, errorMessage: '1 span(s) rejected: span b7ad6b7169203332 "input 255 deep": the span as stored (otel_dump) nests more than 256 levels of objects and arrays, the most that is stored' },
    });
    const query = await post(app, user, '/calls/query', { project_id: project });
    expect(query.statusCode).toBe(200);
    expect(query.json().calls.map((c: { id: string; inputs: unknown }) => [c.id, c.inputs])).toEqual([['b7ad6b7169203331', nestedKeys(BOUND - 2)]]);
    expect(query.body).toContain('{"d":1.0}');
  });
});

/** `{d: {d: ... 1}}`, `levels` objects deep. */
function nestedKeys(levels: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = { d: value };
  return value;
}

describe('training', () => {
  /** A group whose trajectory metadata nests so that the whole group (the stored value) nests `levels`. */
  const groupNesting = (levels: number) => {
    const group = groupGenerationA([1, 0]) as { trajectories: Record<string, unknown>[] };
    // group {} > trajectories [] > trajectory {} > metadata {}: four levels before the value.
    group.trajectories[0].metadata = { d: nested(levels - 4) };
    return group;
  };

  it('logs a group nested at the bound that the rollouts listing returns, and refuses one past it', async () => {
    const { user: owner, model } = await userWithModel(app);
    const logged = await call(app, owner.headers, 'POST', `/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [groupNesting(BOUND)] });
    expect(logged.status, logged.text.slice(0, 300)).toBe(200);
    const listing = await call(app, owner.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=val&step=${logged.body.step}`);
    expect(listing.status, listing.text.slice(0, 300)).toBe(200);
    expect(listing.body.data.map((g: { group: { trajectories: { metadata: unknown }[] } }) => g.group.trajectories[0].metadata)).toEqual([{ d: nested(BOUND - 4) }]);

    await expectRefused(
      () => app.inject({ method: 'POST', url: `/v1/preview/models/${model.id}/log`, headers: { ...owner.headers, 'content-type': 'application/json' }, payload: JSON.stringify({ split: 'val', trajectory_groups: [groupGenerationA(), groupNesting(BOUND + 1)] }) }),
      ['body', 'trajectory_groups', 1],
    );
  });

  it('queues a job whose inputs nest at the bound, and the worker reads them back whole', async () => {
    const { user: owner, model, baseModel } = await userWithModel(app);
    const queued = await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupNesting(BOUND)] });
    expect(queued.status, queued.text.slice(0, 300)).toBe(200);
    const worker = await ScriptedWorker.create(app, owner, [baseModel]);
    const claimed = await worker.claim(5);
    expect(claimed?.job.id).toBe(queued.body.id);
    const inputs = (await worker.inputs(claimed!)) as { trajectories: { metadata: unknown }[] }[];
    expect(inputs.map((g) => g.trajectories[0].metadata)).toEqual([{ d: nested(BOUND - 4) }]);
  });

  it('refuses a job whose inputs or experimental config nest past the bound, naming the field', async () => {
    const { user: owner, model } = await userWithModel(app);
    const send = (body: unknown) => () => app.inject({ method: 'POST', url: '/v1/preview/training-jobs', headers: { ...owner.headers, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
    await expectRefused(send({ model_id: model.id, trajectory_groups: [groupNesting(BOUND + 1)] }), ['body', 'trajectory_groups', 0]);
    await expectRefused(send({ model_id: model.id, trajectory_groups: [groupGenerationA()], experimental_config: { extra: nested(BOUND) } }), ['body', 'experimental_config']);
  });
});
