import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { callItems, post } from './helpers.js';

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

function newProject(): string {
  return `${user.entity}/${uniqueName('fb')}`;
}

const callRef = (project: string, id: string) => `weave:///${project}/call/${id}`;
const feedback = (project: string, overrides: Record<string, unknown> = {}) => ({
  project_id: project,
  weave_ref: callRef(project, 'c1'),
  feedback_type: 'custom',
  payload: { score: 1 },
  ...overrides,
});

async function expectRefused(body: Record<string, unknown>, status: number, reason: string) {
  const before = await databaseFingerprint(app);
  const response = await post(app, user, '/feedback/create', body);
  expect(response.statusCode, response.body).toBe(status);
  expect(response.json()).toEqual({ reason });
  expect(await databaseFingerprint(app)).toEqual(before);
}

describe('/feedback/create', () => {
  it('stores custom feedback on a call that does not exist yet and answers id, created_at, wb_user_id and payload', async () => {
    const project = newProject();
    const response = await post(app, user, '/feedback/create', feedback(project, { creator: 'alice' }));
    expect(response.statusCode, response.body).toBe(200);
    const body = response.json();
    expect(body).toEqual({ id: expect.any(String), created_at: expect.stringMatching(/Z$/), wb_user_id: expect.any(String), payload: { score: 1 } });
    const rows = (await post(app, user, '/feedback/query', { project_id: project })).json().result;
    expect(rows).toEqual([
      {
        id: body.id,
        project_id: project,
        weave_ref: callRef(project, 'c1'),
        wb_user_id: body.wb_user_id,
        creator: 'alice',
        created_at: body.created_at,
        feedback_type: 'custom',
        payload: { score: 1 },
        annotation_ref: null,
        runnable_ref: null,
        call_ref: null,
        trigger_ref: null,
        queue_id: null,
      },
    ]);
  });

  it('honours a client-supplied id, and refuses the same id twice with 409', async () => {
    const project = newProject();
    const first = await post(app, user, '/feedback/create', feedback(project, { id: 'my-feedback-id' }));
    expect(first.json().id).toBe('my-feedback-id');
    const again = await post(app, user, '/feedback/create', feedback(project, { id: 'my-feedback-id' }));
    expect(again.statusCode).toBe(409);
    expect(again.json()).toEqual({ reason: 'Feedback my-feedback-id already exists in this project; send another id or none.' });
  });

  it('adds alias, detoned and detoned_alias to a reaction', async () => {
    const project = newProject();
    const plain = await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.reaction.1', payload: { emoji: '👍' } }));
    expect(plain.json().payload).toEqual({ emoji: '👍', alias: ':thumbs_up:', detoned: '👍', detoned_alias: ':thumbs_up:' });
    const toned = await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.reaction.1', payload: { emoji: '👍🏽' } }));
    expect(toned.json().payload).toEqual({ emoji: '👍🏽', alias: ':thumbs_up_medium_skin_tone:', detoned: '👍', detoned_alias: ':thumbs_up:' });
  });

  it('refuses a reaction that is not exactly one emoji', async () => {
    const project = newProject();
    for (const emoji of ['👍👍', 'ok', '', 3]) {
      await expectRefused(feedback(project, { feedback_type: 'wandb.reaction.1', payload: { emoji } }), 400, 'Value of emoji key in payload must be exactly one emoji');
    }
  });

  it('takes notes of 1 to 1024 characters', async () => {
    const project = newProject();
    const ok = await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.note.1', payload: { note: 'é'.repeat(1024) } }));
    expect(ok.statusCode).toBe(200);
    await expectRefused(feedback(project, { feedback_type: 'wandb.note.1', payload: { note: '' } }), 400, 'Invalid payload for feedback_type wandb.note.1: note must be 1 to 1024 characters (got 0)');
    await expectRefused(feedback(project, { feedback_type: 'wandb.note.1', payload: { note: 'x'.repeat(1025) } }), 400, 'Invalid payload for feedback_type wandb.note.1: note must be 1 to 1024 characters (got 1025)');
    await expectRefused(feedback(project, { feedback_type: 'wandb.note.1', payload: { text: 'x' } }), 400, 'Invalid payload for feedback_type wandb.note.1: note must be a string');
  });

  it('needs annotation_ref for wandb.annotation.* and allows it nowhere else', async () => {
    const project = newProject();
    const created = await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'rating', val: {}, builtin_object_class: 'AnnotationSpec' } });
    const spec = `weave:///${project}/object/rating:${created.json().digest}`;
    const ok = await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.annotation.rating', annotation_ref: spec, payload: { value: 4 } }));
    expect(ok.statusCode, ok.body).toBe(200);
    await expectRefused(feedback(project, { feedback_type: 'wandb.annotation.rating', payload: { value: 4 } }), 400, 'annotation_ref is required for wandb.annotation.* feedback');
    await expectRefused(feedback(project, { annotation_ref: spec }), 400, 'annotation_ref is only allowed for wandb.annotation.* feedback');
    await expectRefused(
      feedback(project, { feedback_type: 'wandb.annotation.rating', annotation_ref: spec, payload: { rating: 4 } }),
      400,
      'Invalid payload for annotation feedback: expected {"value": ...}',
    );
  });

  it('needs a runnable_ref whose name matches the type, and call_ref when the runnable is an op', async () => {
    const project = newProject();
    const scorer = `weave:///${project}/object/correct:abc`;
    const ok = await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.runnable.correct', runnable_ref: scorer, call_ref: callRef(project, 's1'), payload: { output: true } }));
    expect(ok.statusCode, ok.body).toBe(200);
    await expectRefused(feedback(project, { feedback_type: 'wandb.runnable.correct', payload: { output: true } }), 400, 'runnable_ref is required for wandb.runnable.* feedback');
    await expectRefused(
      feedback(project, { feedback_type: 'wandb.runnable.other', runnable_ref: scorer, payload: { output: true } }),
      400,
      'runnable_ref names "correct", but feedback_type wandb.runnable.other expects "other"',
    );
    await expectRefused(
      feedback(project, { feedback_type: 'wandb.runnable.correct', runnable_ref: `weave:///${project}/op/correct:abc`, payload: { output: true } }),
      400,
      'call_ref is required when runnable_ref is an op',
    );
    await expectRefused(feedback(project, { runnable_ref: scorer }), 400, 'runnable_ref is only allowed for wandb.runnable.* feedback');
    await expectRefused(feedback(project, { call_ref: callRef(project, 's1') }), 400, 'call_ref is only allowed for wandb.runnable.* feedback');
    await expectRefused(feedback(project, { trigger_ref: `weave:///${project}/object/monitor:abc` }), 400, 'trigger_ref is only allowed for wandb.runnable.* feedback');
  });

  it('refuses a weave_ref that is not a ref, or that names another project', async () => {
    const project = newProject();
    await expectRefused(feedback(project, { weave_ref: 'not-a-ref' }), 400, 'Invalid ref not-a-ref: must start with weave:///');
    const elsewhere = `${user.entity}/elsewhere`;
    await expectRefused(
      feedback(project, { weave_ref: callRef(elsewhere, 'c1') }),
      400,
      `weave_ref ${callRef(elsewhere, 'c1')} names project ${elsewhere}, not ${project}: feedback may only refer to its own project.`,
    );
  });

  it('refuses a payload over 1 MiB with 413', async () => {
    const project = newProject();
    const payload = { blob: 'x'.repeat(1 << 20) };
    await expectRefused(feedback(project, { payload }), 413, `Feedback payload too large: ${(1 << 20) + 11} bytes > ${1 << 20} bytes`);
  });
});

describe('/feedback/query', () => {
  it('answers requested fields, payload paths, *_dump names and count(*)', async () => {
    const project = newProject();
    await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.note.1', payload: { note: 'first', nested: { n: 2 } } }));
    await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.note.1', payload: { note: 'second', nested: { n: 10 } } }));
    await post(app, user, '/feedback/create', feedback(project, { weave_ref: callRef(project, 'c2'), payload: { score: 0.5 } }));

    const paths = await post(app, user, '/feedback/query', { project_id: project, fields: ['feedback_type', 'payload.note', 'payload_dump'], sort_by: [{ field: 'payload.nested.n', direction: 'desc' }], limit: 2 });
    expect(paths.json().result).toEqual([
      { feedback_type: 'wandb.note.1', 'payload.note': 'second', payload: { note: 'second', nested: { n: 10 } } },
      { feedback_type: 'wandb.note.1', 'payload.note': 'first', payload: { note: 'first', nested: { n: 2 } } },
    ]);
    const count = await post(app, user, '/feedback/query', { project_id: project, fields: ['count(*)'], query: { $expr: { $eq: [{ $getField: 'feedback_type' }, { $literal: 'wandb.note.1' }] } } });
    expect(count.json()).toEqual({ result: [{ 'count(*)': 2 }], total_count: 2 });
    const byPayload = await post(app, user, '/feedback/query', { project_id: project, fields: ['weave_ref'], query: { $expr: { $gt: [{ $getField: 'payload.score' }, { $literal: 0.1 }] } } });
    expect(byPayload.json().result).toEqual([{ weave_ref: callRef(project, 'c2') }]);
    const offset = await post(app, user, '/feedback/query', { project_id: project, fields: ['payload.note'], limit: 1, offset: 1 });
    expect(offset.json().result).toEqual([{ 'payload.note': 'second' }]);
    // total_count counts what the query matches, not the page (weave 0.53+ require the key).
    expect([paths.json().total_count, byPayload.json().total_count, offset.json().total_count]).toEqual([3, 1, 3]);
  });

  it('answers 403 for an unknown field and 400 for a bad sort direction', async () => {
    const project = newProject();
    const unknown = await post(app, user, '/feedback/query', { project_id: project, fields: ['nope'] });
    expect(unknown.statusCode).toBe(403);
    expect(unknown.json()).toEqual({ reason: 'Invalid field "nope": not a field of feedback' });
    const sort = await post(app, user, '/feedback/query', { project_id: project, sort_by: [{ field: 'created_at', direction: 'up' }] });
    expect(sort.statusCode).toBe(400);
    expect(sort.json()).toEqual({ reason: 'Invalid sort direction "up": expected asc or desc' });
  });
});

describe('/feedback/purge', () => {
  it('deletes by one id, an $or of ids, or $in ids', async () => {
    const project = newProject();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await post(app, user, '/feedback/create', feedback(project))).json().id);
    const id = (value: string) => ({ $eq: [{ $getField: 'id' }, { $literal: value }] });
    for (const query of [{ $expr: id(ids[0]) }, { $expr: { $or: [id(ids[1]), id(ids[2])] } }, { $expr: { $in: [{ $getField: 'id' }, [{ $literal: ids[3] }]] } }]) {
      const response = await post(app, user, '/feedback/purge', { project_id: project, query });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json()).toEqual({});
    }
    const left = await post(app, user, '/feedback/query', { project_id: project, fields: ['id'] });
    expect(left.json().result).toEqual([{ id: ids[4] }]);
  });

  it('refuses any query that does not name ids only, deleting nothing', async () => {
    const project = newProject();
    await post(app, user, '/feedback/create', feedback(project));
    const queries = [
      { $eq: [{ $getField: 'feedback_type' }, { $literal: 'custom' }] },
      { $and: [{ $eq: [{ $getField: 'id' }, { $literal: 'x' }] }] },
      { $or: [{ $eq: [{ $getField: 'id' }, { $literal: 'x' }] }, { $gt: [{ $getField: 'created_at' }, { $literal: 0 }] }] },
      { $eq: [{ $getField: 'id' }, { $getField: 'id' }] },
      { $not: [{ $eq: [{ $getField: 'id' }, { $literal: 'x' }] }] },
    ];
    for (const $expr of queries) {
      const before = await databaseFingerprint(app);
      const response = await post(app, user, '/feedback/purge', { project_id: project, query: { $expr } });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ reason: 'Can only purge by specifying one or more feedback ids' });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
  });
});

describe('/feedback/replace and /feedback/batch/create', () => {
  it('replaces a row with a new one and answers it', async () => {
    const project = newProject();
    const old = (await post(app, user, '/feedback/create', feedback(project, { feedback_type: 'wandb.note.1', payload: { note: 'old' } }))).json();
    const replaced = await post(app, user, '/feedback/replace', feedback(project, { feedback_id: old.id, feedback_type: 'wandb.note.1', payload: { note: 'new' } }));
    expect(replaced.statusCode, replaced.body).toBe(200);
    expect(replaced.json()).toMatchObject({ id: expect.any(String), payload: { note: 'new' } });
    expect(replaced.json().id).not.toBe(old.id);
    const rows = (await post(app, user, '/feedback/query', { project_id: project, fields: ['id', 'payload.note'] })).json().result;
    expect(rows).toEqual([{ id: replaced.json().id, 'payload.note': 'new' }]);
  });

  it('keeps the old row when the new feedback is invalid', async () => {
    const project = newProject();
    const old = (await post(app, user, '/feedback/create', feedback(project))).json();
    const before = await databaseFingerprint(app);
    const response = await post(app, user, '/feedback/replace', feedback(project, { feedback_id: old.id, feedback_type: 'wandb.note.1', payload: { note: '' } }));
    expect(response.statusCode).toBe(400);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('creates a batch all or nothing', async () => {
    const project = newProject();
    const ok = await post(app, user, '/feedback/batch/create', { batch: [feedback(project), feedback(project, { feedback_type: 'wandb.reaction.1', payload: { emoji: '🔥' } })] });
    expect(ok.statusCode, ok.body).toBe(200);
    expect(ok.json().res).toHaveLength(2);
    expect(ok.json().res[1].payload.alias).toBe(':fire:');
    const before = await databaseFingerprint(app);
    const bad = await post(app, user, '/feedback/batch/create', { batch: [feedback(project), feedback(project, { feedback_type: 'wandb.note.1', payload: {} })] });
    expect(bad.statusCode).toBe(400);
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});

describe('include_feedback', () => {
  it('puts each call\'s feedback under summary.weave.feedback', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: [...callItems(project, { id: 'a' }), ...callItems(project, { id: 'b' })] });
    const created = (await post(app, user, '/feedback/create', feedback(project, { weave_ref: callRef(project, 'a'), feedback_type: 'wandb.reaction.1', payload: { emoji: '👎' } }))).json();
    const calls = (await post(app, user, '/calls/query', { project_id: project, include_feedback: true })).json().calls;
    expect(calls[0].summary.weave.feedback).toEqual([
      expect.objectContaining({ id: created.id, feedback_type: 'wandb.reaction.1', weave_ref: callRef(project, 'a'), payload: created.payload, created_at: created.created_at }),
    ]);
    expect(calls[1].summary.weave.feedback).toEqual([]);
    const without = (await post(app, user, '/calls/query', { project_id: project })).json().calls;
    expect(without[0].summary.weave.feedback).toBeUndefined();
  });
});
