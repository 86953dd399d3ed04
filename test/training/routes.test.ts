import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { call, groupGenerationA, groupGenerationB, groupGenerationC, ScriptedWorker, sftRows, storeDataset, userWithModel } from './fixtures.js';

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const get = (url: string, as: TestUser = user) => call(app, as.headers, 'GET', url);
const post = (url: string, body?: unknown, as: TestUser = user) => call(app, as.headers, 'POST', url, body ?? {});

/** Checkpoints at the given steps, inserted in that order (only completed jobs make them in the API). */
async function addCheckpoints(modelId: string, steps: number[], metrics: Record<string, number> = {}): Promise<Map<number, string>> {
  const ids = new Map<number, string>();
  for (const step of steps) {
    const id = crypto.randomUUID();
    await sql`insert into checkpoints (id, model_id, step, uri, metrics) values (${id}, ${modelId}, ${step}, ${`s3://c/${step}`}, ${JSON.stringify(metrics)}::jsonb)`.execute(app.db);
    ids.set(step, id);
  }
  return ids;
}

/** Follows `after` = last id through every page; checks each page's envelope on the way. */
async function walk(url: string, limit: number, extra = '', as: TestUser = user): Promise<{ items: any[]; pages: number }> {
  const items: any[] = [];
  let after = '';
  for (let pages = 1; ; pages++) {
    const reply = await get(`${url}?limit=${limit}${extra}${after ? `&after=${after}` : ''}`, as);
    expect(reply.status, reply.text).toBe(200);
    const page = reply.body;
    expect(page.object).toBe('list');
    expect(page.data.length).toBeLessThanOrEqual(limit);
    expect(page.first_id).toBe(page.data[0]?.id ?? '');
    expect(page.last_id).toBe(page.data.at(-1)?.id ?? '');
    items.push(...page.data);
    if (!page.has_more) return { items, pages };
    expect(page.data).toHaveLength(limit);
    after = page.last_id;
  }
}

describe('models', () => {
  it('registers with the key\'s own entity when none is named, and answers 409 for the same name without return_existing', async () => {
    const name = uniqueName('agent');
    const body = { project: 'p', name, base_model: 'OpenPipe/Qwen3-14B-Instruct' };
    const created = await post('/v1/preview/models', body);
    expect(created.body).toEqual({ id: expect.any(String), entity: user.entity, project: 'p', name, base_model: body.base_model, run_id: null, created_at: expect.any(String) });
    const before = await databaseFingerprint(app);
    const again = await post('/v1/preview/models', body);
    expect(again).toMatchObject({
      status: 409,
      body: { detail: `Model ${user.entity}/p/${name} already exists. Send "return_existing": true to get it.` },
    });
    expect(await databaseFingerprint(app)).toEqual(before);
    expect((await post('/v1/preview/models', { ...body, return_existing: true })).body.id).toBe(created.body.id);
    expect((await get(`/v1/preview/models/${created.body.id}`)).body).toEqual(created.body);
  });

  it('lists the base models this server trains (any, when none are configured)', async () => {
    expect(await get('/v1/preview/base-models')).toMatchObject({ status: 200, body: [] });
  });

  it('lists a project\'s models oldest first, over every page size', async () => {
    const owner = await createUserWithKey(app);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await post('/v1/preview/models', { project: 'listed', name: `m${i}`, base_model: 'b' }, owner)).body.id);
    await post('/v1/preview/models', { project: 'elsewhere', name: 'x', base_model: 'b' }, owner);
    for (let limit = 1; limit <= 6; limit++) {
      const { items } = await walk('/v1/preview/models', limit, `&entity=${owner.entity}&project=listed`, owner);
      expect(items.map((m) => m.id)).toEqual(ids);
    }
    expect((await get('/v1/preview/models?project=listed', owner)).body.data).toHaveLength(5);
    // A model deleted between two pages: the listing goes on after it.
    const firstPage = (await get('/v1/preview/models?project=listed&limit=2', owner)).body;
    expect((await call(app, owner.headers, 'DELETE', `/v1/preview/models/${firstPage.last_id}`)).status).toBe(200);
    const next = await get(`/v1/preview/models?project=listed&limit=2&after=${firstPage.last_id}`, owner);
    expect([next.status, next.body.data.map((m: { id: string }) => m.id)]).toEqual([200, ids.slice(2, 4)]);
    // Another tenant's model, deleted or not, is no cursor.
    expect((await get(`/v1/preview/models?after=${firstPage.last_id}`)).status).toBe(422);
    const unknown = crypto.randomUUID();
    expect(await get(`/v1/preview/models?after=${unknown}`, owner)).toMatchObject({
      status: 422,
      body: { detail: [{ type: 'value_error', loc: ['query', 'after'], msg: 'Value error, after is not the id of a model this key can see', input: unknown }] },
    });
  });

  it('deleting a model removes its checkpoints and logs, cancels its queued jobs and tells the inference router', async () => {
    const { model } = await userWithModel(app, user);
    const ids = await addCheckpoints(model.id, [1, 2]);
    await post(`/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [groupGenerationA()] });
    const job = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const heard: { steps: number[]; ids?: string[] }[] = [];
    const listener = (event: { steps: number[]; ids?: string[] }) => heard.push(event);
    app.events.on('checkpoints-deleted', listener);
    const reply = await call(app, user.headers, 'DELETE', `/v1/preview/models/${model.id}`);
    app.events.off('checkpoints-deleted', listener);
    expect(reply.body).toEqual({ model_id: model.id, deleted_checkpoints: 2, deleted_run: true });
    expect(heard).toEqual([
      { entity: user.entity, project: 'proj', model: model.name, steps: expect.arrayContaining([1, 2]), uris: expect.arrayContaining(['s3://c/1', 's3://c/2']), ids: expect.any(Array) },
    ]);
    // Each id is its step's checkpoint's: the router refuses those adapters from then on.
    expect(heard[0].ids).toEqual(heard[0].steps.map((step) => ids.get(step)));
    expect(await get(`/v1/preview/models/${model.id}`)).toMatchObject({ status: 404, body: { detail: `model ${model.id} not found` } });
    // the job stays readable, canceled, with the event that stops a polling client
    expect((await get(`/v1/preview/training-jobs/${job.body.id}`)).body).toMatchObject({ status: 'CANCELED' });
    expect((await get(`/v1/preview/training-jobs/${job.body.id}/events`)).body.data.map((e: any) => e.type)).toEqual(['training_failed']);
    // the name can be registered again
    expect((await post('/v1/preview/models', { project: 'proj', name: model.name, base_model: model.base_model })).status).toBe(200);
  });
});

describe('checkpoints', () => {
  it('pages by step in both orders over every page size, and from every position', async () => {
    const { model } = await userWithModel(app, user);
    const ids = await addCheckpoints(model.id, [3, 1, 7, 5, 2, 6, 4]);
    const url = `/v1/preview/models/${model.id}/checkpoints`;
    const asc = [1, 2, 3, 4, 5, 6, 7];
    for (const order of ['asc', 'desc'] as const) {
      const expected = order === 'asc' ? asc : [...asc].reverse();
      for (let limit = 1; limit <= 8; limit++) {
        const { items, pages } = await walk(url, limit, `&order=${order}`);
        expect(items.map((c) => c.step)).toEqual(expected);
        expect(pages).toBe(Math.max(1, Math.ceil(7 / limit)));
        for (const item of items) expect(item).toEqual({ id: ids.get(item.step), step: item.step, metrics: {} });
      }
      for (const [index, step] of expected.entries()) {
        const page = (await get(`${url}?order=${order}&limit=100&after=${ids.get(step)}`)).body;
        expect(page.data.map((c: any) => c.step)).toEqual(expected.slice(index + 1));
        expect(page.has_more).toBe(false);
      }
    }
    // past the end: an empty page with empty ids
    expect((await get(`${url}?after=${ids.get(7)}`)).body).toEqual({ object: 'list', data: [], first_id: '', last_id: '', has_more: false });
    // ART's get_step
    expect((await get(`${url}?limit=1&order=desc`)).body).toEqual({ object: 'list', data: [{ id: ids.get(7), step: 7, metrics: {} }], first_id: ids.get(7), last_id: ids.get(7), has_more: true });
  });

  it('an `after` that is not a checkpoint of this model is a 422', async () => {
    const { model } = await userWithModel(app, user);
    const other = await userWithModel(app, user);
    const foreign = await addCheckpoints(other.model.id, [1]);
    for (const after of [foreign.get(1)!, 'not-a-uuid']) {
      expect(await get(`/v1/preview/models/${model.id}/checkpoints?after=${after}`)).toMatchObject({
        status: 422,
        body: { detail: [{ type: 'value_error', loc: ['query', 'after'], msg: `Value error, after is not the id of a checkpoint of model ${model.id}`, input: after }] },
      });
    }
  });

  it('limit is 1 to 100 and order asc or desc', async () => {
    const { model } = await userWithModel(app, user);
    const url = `/v1/preview/models/${model.id}/checkpoints`;
    expect((await get(`${url}?limit=0`)).body).toEqual({
      detail: [{ type: 'greater_than_equal', loc: ['query', 'limit'], msg: 'Input should be greater than or equal to 1', input: '0', ctx: { ge: 1 } }],
    });
    expect((await get(`${url}?limit=101`)).status).toBe(422);
    expect((await get(`${url}?order=newest`)).body.detail[0]).toMatchObject({ type: 'literal_error', loc: ['query', 'order'] });
  });

  it('deletes by step with a body on DELETE and reports the steps it did not find', async () => {
    const { model } = await userWithModel(app, user);
    await addCheckpoints(model.id, [1, 2, 3]);
    const reply = await call(app, user.headers, 'DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps: [1, 3, 9] });
    expect(reply).toMatchObject({ status: 200, body: { deleted_count: 2, not_found_steps: [9] } });
    expect((await get(`/v1/preview/models/${model.id}/checkpoints`)).body.data.map((c: any) => c.step)).toEqual([2]);
  });
});

describe('log', () => {
  it('stores the groups and computes ART\'s metrics at the current step, merged into that checkpoint', async () => {
    const { model } = await userWithModel(app, user);
    const url = `/v1/preview/models/${model.id}/log`;
    const groups = [groupGenerationA(), groupGenerationB(), groupGenerationC()];
    const atZero = await post(url, { split: 'val', trajectory_groups: groups, model_id: model.id });
    expect(atZero.status, atZero.text).toBe(200);
    expect(atZero.body).toEqual({
      step: 0,
      metrics: {
        'val/moves': 3,
        'val/won': 0.5,
        'val/duration': 1.25,
        'val/group/difficulty': 2,
        'val/reward': expect.closeTo(2.5 / 6, 12),
        'val/reward_std_dev': expect.closeTo((0.5 + 0.25 + 0.5) / 3, 12),
        'val/exception_rate': expect.closeTo(1 / 7, 12),
        'data/step_num_scenarios': 3,
        'data/step_num_trajectories': 7,
        'data/step_num_groups_submitted': 3,
      },
    });
    const stored = await sql<{ n: number }>`select count(*)::int as n from trajectory_logs where model_id = ${model.id}`.execute(app.db);
    expect(stored.rows[0].n).toBe(3);

    await addCheckpoints(model.id, [1], { 'loss/train': 0.5 });
    const atOne = await post(url, { split: 'train', trajectory_groups: [groupGenerationA([1, 0]), groupGenerationA([1, 1])] });
    expect(atOne.body).toMatchObject({ step: 1, metrics: { 'train/reward': 0.75, 'data/step_num_groups_trainable': 1 } });
    expect((await get(`/v1/preview/models/${model.id}/checkpoints`)).body.data[0].metrics).toMatchObject({ 'loss/train': 0.5, 'train/reward': 0.75 });

    const history = await get(`/v1/preview/models/${model.id}/metrics`);
    const [first, second] = history.body.data.map((r: any) => r.id);
    expect(history.body).toEqual({
      object: 'list',
      data: [
        { id: first, step: 0, split: 'val', metrics: atZero.body.metrics, created_at: expect.any(String) },
        { id: second, step: 1, split: 'train', metrics: atOne.body.metrics, created_at: expect.any(String) },
      ],
      first_id: first,
      last_id: second,
      has_more: false,
    });
    expect((await get(`/v1/preview/models/${model.id}/metrics?split=train`)).body.data.map((r: any) => r.step)).toEqual([1]);
  });

  it('stores integers beyond 2^53 digit for digit and answers them so on the rollouts page', async () => {
    const { model } = await userWithModel(app, user);
    // A 64-bit hash in the metadata and a bound in a tool's schema, as Python's json writes them.
    const text =
      '{"split":"train","trajectory_groups":[{"metadata":{"seed":18446744073709551615},"trajectories":[{"reward":1,' +
      '"messages_and_choices":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f",' +
      '"parameters":{"type":"integer","maximum":9007199254740993}}}],"metadata":{"ids":[-9223372036854775808,1]}}]}]}';
    const logged = await app.inject({ method: 'POST', url: `/v1/preview/models/${model.id}/log`, headers: { ...user.headers, 'content-type': 'application/json' }, payload: text });
    expect(logged.statusCode, logged.body).toBe(200);
    expect(logged.json().metrics).toMatchObject({ 'train/reward': 1 });

    const page = await app.inject({ method: 'GET', url: `/v1/preview/models/${model.id}/trajectories?split=train&step=0`, headers: user.headers });
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('"metadata":{"seed":18446744073709551615}');
    expect(page.body).toContain('"maximum":9007199254740993');
    expect(page.body).toContain('"ids":[-9223372036854775808,1]');
    expect(page.body).not.toContain('\\u0000');
  });

  it('refuses a call whose metrics maps name more than 1,000 metrics together, and stores nothing', async () => {
    const { model } = await userWithModel(app, user);
    const named = (from: number, count: number) => Object.fromEntries(Array.from({ length: count }, (_, i) => [`m${from + i}`, i]));
    const trajectories = [{ reward: 1, metrics: named(0, 600) }, { reward: 0, metrics: named(300, 600) }];
    // 900 trajectory metrics and 100 group metrics: at the bound.
    const atBound = await post(`/v1/preview/models/${model.id}/log`, { split: 'train', trajectory_groups: [{ trajectories, metrics: named(0, 100) }] });
    expect(atBound.status, atBound.text).toBe(200);
    expect(Object.keys(atBound.body.metrics)).toHaveLength(1000 + 7);

    const before = await databaseFingerprint(app);
    const refused = await post(`/v1/preview/models/${model.id}/log`, { split: 'train', trajectory_groups: [{ trajectories, metrics: named(0, 101) }] });
    expect([refused.status, refused.body]).toEqual([
      422,
      {
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'trajectory_groups'],
            msg: 'Value error, the trajectories and groups of one log call may name at most 1000 metrics in all; these name 1001',
            input: null,
          },
        ],
      },
    ]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('refuses a number no double holds, naming where it is, and stores nothing', async () => {
    const { model } = await userWithModel(app, user);
    const text = '{"split":"train","trajectory_groups":[{"trajectories":[{"reward":1,"metadata":{"big":1e400,"ok":2e10}}],"metrics":{"m":-1E+999}}]}';
    const before = await databaseFingerprint(app);
    const refused = await app.inject({ method: 'POST', url: `/v1/preview/models/${model.id}/log`, headers: { ...user.headers, 'content-type': 'application/json' }, payload: text });
    expect([refused.statusCode, refused.json()]).toEqual([
      422,
      {
        detail: [
          { type: 'finite_number', loc: ['body', 'trajectory_groups', 0, 'trajectories', 0, 'metadata', 'big'], msg: 'Input should be a finite number', input: 'Infinity' },
          { type: 'finite_number', loc: ['body', 'trajectory_groups', 0, 'metrics', 'm'], msg: 'Input should be a finite number', input: '-Infinity' },
        ],
      },
    ]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('pages the metric history by step, then log order, with after = the last record\'s id', async () => {
    const { model } = await userWithModel(app, user);
    const url = `/v1/preview/models/${model.id}/log`;
    // Two log calls at step 0 (val and train), one at step 1.
    await post(url, { split: 'val', trajectory_groups: [groupGenerationA([1, 0])] });
    await post(url, { split: 'train', trajectory_groups: [groupGenerationA([0, 0])] });
    await addCheckpoints(model.id, [1]);
    await post(url, { split: 'val', trajectory_groups: [groupGenerationA([1, 1])] });

    const seen: [number, string][] = [];
    let after: string | undefined;
    for (;;) {
      const page = await get(`/v1/preview/models/${model.id}/metrics?limit=1${after ? `&after=${after}` : ''}`);
      expect(page.status).toBe(200);
      expect(page.body.data).toHaveLength(1);
      seen.push([page.body.data[0].step, page.body.data[0].split]);
      after = page.body.last_id;
      if (!page.body.has_more) break;
    }
    expect(seen).toEqual([[0, 'val'], [0, 'train'], [1, 'val']]);
    // Newest first, the reverse, in pages too.
    const newest = await get(`/v1/preview/models/${model.id}/metrics?order=desc&limit=2`);
    expect(newest.body.data.map((r: any) => [r.step, r.split])).toEqual([[1, 'val'], [0, 'train']]);
    const older = await get(`/v1/preview/models/${model.id}/metrics?order=desc&limit=2&after=${newest.body.last_id}`);
    expect(older.body).toMatchObject({ data: [{ step: 0, split: 'val' }], has_more: false });
    const valOnly = await get(`/v1/preview/models/${model.id}/metrics?split=val&limit=1`);
    expect((await get(`/v1/preview/models/${model.id}/metrics?split=val&after=${valOnly.body.last_id}`)).body.data.map((r: any) => r.step)).toEqual([1]);

    // A cursor that is not a record of this model is the client's error.
    const other = await userWithModel(app, user);
    await post(`/v1/preview/models/${other.model.id}/log`, { split: 'val', trajectory_groups: [groupGenerationA([1, 0])] });
    const foreign = (await get(`/v1/preview/models/${other.model.id}/metrics`)).body.last_id;
    expect((await get(`/v1/preview/models/${model.id}/metrics?after=${foreign}`)).body).toEqual({
      detail: [{ type: 'value_error', loc: ['query', 'after'], msg: `Value error, after is not the id of a metric record of model ${model.id}`, input: foreign }],
    });
    const invalid = await get(`/v1/preview/models/${model.id}/metrics?after=x&limit=10001`);
    expect(invalid.status).toBe(422);
    expect(invalid.body.detail.map((d: any) => d.loc)).toEqual([['query', 'after'], ['query', 'limit']]);
  });
});

describe('jobs', () => {
  it('answers every documented field of a job, also before it runs', async () => {
    const { model } = await userWithModel(app, user);
    const created = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()], experimental_config: null });
    expect((await get(`/v1/preview/training-jobs/${created.body.id}`)).body).toEqual({
      id: created.body.id,
      model_id: model.id,
      kind: 'rl',
      status: 'QUEUED',
      created_at: expect.any(String),
      training_start: null,
      training_end: null,
      error_message: null,
      attempt: 1,
      base_step: null,
      target_step: null,
      cancel_requested: false,
    });
  });

  it('lists jobs newest first, by model and status, over every page size', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [] })).body.id);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    await worker.claim();
    for (let limit = 1; limit <= 5; limit++) {
      const { items } = await walk('/v1/preview/training-jobs', limit, `&model_id=${model.id}`);
      expect(items.map((j) => j.id)).toEqual([...ids].reverse());
    }
    expect((await get(`/v1/preview/training-jobs?model_id=${model.id}&status=RUNNING`)).body.data.map((j: any) => j.id)).toEqual([ids[0]]);
    expect((await get(`/v1/preview/training-jobs?status=DONE`)).status).toBe(422);
  });

  it('answers 404 for an unknown job and a cancel of a finished job returns it unchanged', async () => {
    const id = crypto.randomUUID();
    expect(await get(`/v1/preview/training-jobs/${id}`)).toMatchObject({ status: 404, body: { detail: `training job ${id} not found` } });
    expect(await post(`/v1/preview/training-jobs/${id}/cancel`)).toMatchObject({ status: 404, body: { detail: `training job ${id} not found` } });
    const { model, baseModel } = await userWithModel(app, user);
    const job = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [] });
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    await worker.train({ gradientSteps: 1 });
    expect((await post(`/v1/preview/training-jobs/${job.body.id}/cancel`)).body).toMatchObject({ status: 'COMPLETED', cancel_requested: false });
  });
});

describe('events', () => {
  it('pages in append order over every page size; `after` is strictly after, unknown starts over', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const job = await post('/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    await worker.train({ gradientSteps: 9 });
    const url = `/v1/preview/training-jobs/${job.body.id}/events`;
    const all = (await get(`${url}?limit=100`)).body.data as any[];
    expect(all.map((e) => e.type)).toEqual(['training_started', ...Array(9).fill('gradient_step'), 'training_ended']);
    expect(all.slice(1, 10).map((e) => e.data.gradient_step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (let limit = 1; limit <= 12; limit++) {
      expect((await walk(url, limit)).items).toEqual(all);
    }
    for (const [index, event] of all.entries()) {
      expect((await get(`${url}?limit=100&after=${event.id}`)).body.data).toEqual(all.slice(index + 1));
    }
    for (const unknown of [crypto.randomUUID(), 'garbage']) {
      expect((await get(`${url}?after=${unknown}&limit=100`)).body.data).toEqual(all);
    }
  });
});

describe('SFT training data', () => {
  const create = (modelId: string, url: string, as: TestUser = user) =>
    post('/v1/preview/sft-training-jobs', { model_id: modelId, training_data_url: url }, as);

  it('resolves a dataset object, a table and a JSONL file into the job\'s inputs; training_folder_url is an alias', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const rows = sftRows(3);
    const refs = await storeDataset(app, user, rows);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    for (const ref of [refs.datasetRef, refs.tableRef, refs.fileRef]) {
      const job = await create(model.id, ref);
      expect(job.status, job.text).toBe(200);
      const claimed = (await worker.claim())!;
      expect(claimed.job).toMatchObject({ id: job.body.id, kind: 'sft', num_inputs: 3 });
      expect(await worker.inputs(claimed)).toEqual(rows);
      await worker.fail(claimed, 'done with it', false);
    }
    const alias = await post('/v1/preview/sft-training-jobs', { model_id: model.id, training_folder_url: refs.tableRef, config: null });
    expect(alias.status).toBe(200);
    expect((await worker.claim())!.job.config.training_data_url).toBe(refs.tableRef);
  });

  it('a reference that does not resolve is a 422 now, and nothing is stored', async () => {
    const { model } = await userWithModel(app, user);
    const missing = `weave:///${user.entity}/datasets/table/${'0'.repeat(40)}`;
    const before = await databaseFingerprint(app);
    expect(await create(model.id, missing)).toMatchObject({
      status: 422,
      body: {
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'training_data_url'],
            msg: `Value error, training_data_url ${missing} cannot be used: Table ${'0'.repeat(40)} not found in ${user.entity}/datasets (${missing})`,
            input: missing,
          },
        ],
      },
    });
    expect((await create(model.id, 'hf://datasets/e/data')).body.detail[0].msg).toBe(
      'Value error, training_data_url hf://datasets/e/data cannot be used: Training data "hf://datasets/e/data" is not a weave:/// URL (dataset object, table or file).',
    );
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('rows that are not chat transcripts, or no rows at all, are a 422', async () => {
    const { model } = await userWithModel(app, user);
    const { tableRef } = await storeDataset(app, user, [{ prompt: 'no messages here' }]);
    expect((await create(model.id, tableRef)).body.detail[0].msg).toBe(
      `Value error, training_data_url ${tableRef} cannot be used: row 0 is not a training row (Invalid input: expected array, received undefined at messages); each row needs "messages", a list of chat messages`,
    );
    const empty = await storeDataset(app, user, []);
    expect((await create(model.id, empty.tableRef)).body.detail[0].msg).toBe(`Value error, training_data_url ${empty.tableRef} cannot be used: it has no rows`);
  });

  it('http(s) URLs are refused unless the server allows them', async () => {
    const { model } = await userWithModel(app, user);
    const url = 'https://example.com/train.jsonl';
    expect((await create(model.id, url)).body).toEqual({
      detail: [
        {
          type: 'value_error',
          loc: ['body', 'training_data_url'],
          msg: `Value error, training_data_url ${url} cannot be used: http(s) URLs are disabled on this server (SFT_ALLOW_HTTP_URLS=false, as fetching user-named URLs is a server-side request forgery risk); store the data through the tracing API and send its ref, or ask the operator to set SFT_ALLOW_HTTP_URLS=true`,
          input: url,
          ctx: { error: expect.any(String) },
        },
      ],
    });
  });
});
