import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { post } from './helpers.js';

/** Builtin object classes on /obj/create, and annotation feedback checked against its AnnotationSpec. */

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('builtin')}`;
});
afterAll(async () => {
  await app.close();
});

const create = (objectId: string, val: unknown, builtin?: string) =>
  post(app, user, '/obj/create', { obj: { project_id: project, object_id: objectId, val, builtin_object_class: builtin } });

async function read(objectId: string) {
  const response = await post(app, user, '/obj/read', { project_id: project, object_id: objectId, digest: 'latest' });
  expect(response.statusCode, response.body).toBe(200);
  return response.json().obj;
}

describe('/obj/create with builtin_object_class', () => {
  it('stores an AnnotationSpec in weave\'s dumped form, defaults filled and unknown keys dropped', async () => {
    const response = await create('rating', { field_schema: { type: 'integer', minimum: 1, maximum: 5 }, extra: 'dropped' }, 'AnnotationSpec');
    expect(response.statusCode, response.body).toBe(200);
    const obj = await read('rating');
    expect(obj.val).toEqual({
      _type: 'AnnotationSpec',
      name: null,
      description: null,
      field_schema: { type: 'integer', minimum: 1, maximum: 5 },
      unique_among_creators: false,
      op_scope: null,
      _class_name: 'AnnotationSpec',
      _bases: ['BaseObject', 'BaseModel'],
    });
    expect([obj.base_object_class, obj.leaf_object_class]).toEqual(['AnnotationSpec', 'AnnotationSpec']);
    // The same value sent again in its dumped form is the same version (same digest).
    const again = await create('rating', obj.val);
    expect(again.json().digest).toBe(response.json().digest);
  });

  it('dumps nested models with their own _type and _bases (Leaderboard columns)', async () => {
    const column = { evaluation_object_ref: `weave:///${project}/object/eval:abc`, scorer_name: 's', summary_metric_path: 'mean' };
    expect((await create('board', { name: 'Board', columns: [column] }, 'Leaderboard')).statusCode).toBe(200);
    expect((await read('board')).val).toEqual({
      _type: 'Leaderboard',
      name: 'Board',
      description: null,
      columns: [{ _type: 'LeaderboardColumn', ...column, should_minimize: null, _class_name: 'LeaderboardColumn', _bases: ['BaseModel'] }],
      _class_name: 'Leaderboard',
      _bases: ['BaseObject', 'BaseModel'],
    });
  });

  it('writes a float field given an integer as a float, as pydantic does', async () => {
    expect((await create('alert', { spec: { threshold: 3 } }, 'AlertSpec')).statusCode).toBe(200);
    const response = await post(app, user, '/obj/read', { project_id: project, object_id: 'alert', digest: 'latest' });
    expect(response.body).toContain('"threshold":3.0');
  });

  it('answers 400 to an unknown class, a value the class refuses, a mismatched class and a bad field_schema', async () => {
    const cases: [unknown, string, string][] = [
      [{}, 'Nope', 'Unknown object class: Nope (expected one of '],
      [{ columns: [{ scorer_name: 's' }] }, 'Leaderboard', 'Invalid Leaderboard.columns[0].evaluation_object_ref: field required'],
      [{ label: 'x', view_type: 'traces', definition: { page: 'one' } }, 'SavedView', 'Invalid SavedView.definition.page: expected an integer'],
      [{ _class_name: 'Leaderboard', _bases: ['BaseObject', 'BaseModel'], columns: [] }, 'SavedView', "builtin_object_class must match the value's own class: Leaderboard != SavedView"],
      [[1], 'AnnotationSpec', 'builtin_object_class cannot be given for a value that is not an object'],
      [{ field_schema: { type: 'no-such-type' } }, 'AnnotationSpec', 'Invalid AnnotationSpec.field_schema: not a valid JSON Schema'],
      // Patterns run on RE2 (linear time), which has no lookaround and no backreferences.
      [{ field_schema: { type: 'string', pattern: '^(?!x)' } }, 'AnnotationSpec', 'Invalid AnnotationSpec.field_schema: not a valid JSON Schema (error parsing regexp: invalid or unsupported Perl syntax: `(?!`)'],
      [{ field_schema: { type: 'string', pattern: '(a)\\1' } }, 'AnnotationSpec', 'Invalid AnnotationSpec.field_schema: not a valid JSON Schema (error parsing regexp: invalid escape sequence: `\\1`)'],
    ];
    for (const [val, cls, reason] of cases) {
      const response = await create('refused', val, cls);
      expect(response.statusCode, response.body).toBe(400);
      expect(response.json().reason.startsWith(reason), response.json().reason).toBe(true);
    }
    expect((await post(app, user, '/obj/read', { project_id: project, object_id: 'refused', digest: 'latest' })).statusCode).toBe(404);
  });
});

describe('annotation feedback', () => {
  let spec: string;
  beforeAll(async () => {
    const response = await create('stars', { field_schema: { type: 'integer', minimum: 1, maximum: 5 } }, 'AnnotationSpec');
    spec = `weave:///${project}/object/stars:${response.json().digest}`;
  });

  const annotate = (value: unknown, extra: Record<string, unknown> = {}) =>
    post(app, user, '/feedback/create', {
      project_id: project,
      weave_ref: `weave:///${project}/call/c1`,
      feedback_type: 'wandb.annotation.stars',
      annotation_ref: spec,
      payload: { value },
      ...extra,
    });

  it('accepts a value the spec\'s field_schema accepts', async () => {
    const response = await annotate(4);
    expect(response.statusCode, response.body).toBe(200);
  });

  it('refuses a value the spec refuses, a spec of another name and a missing spec with 400', async () => {
    for (const value of [9, 'four', 2.5]) {
      const response = await annotate(value);
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ reason: 'Feedback payload does not match annotation spec' });
    }
    const other = await annotate(4, { feedback_type: 'wandb.annotation.other' });
    expect(other.json()).toEqual({ reason: 'annotation_ref must point to an object with name other' });
    const missing = await annotate(4, { annotation_ref: `weave:///${project}/object/stars:nope` });
    expect(missing.json()).toEqual({ reason: `Annotation ref weave:///${project}/object/stars:nope not found` });
    const rows = (await post(app, user, '/feedback/query', { project_id: project, fields: ['count(*)'] })).json().result;
    expect(rows).toEqual([{ 'count(*)': 1 }]);
  });

  it('names a stored spec whose pattern RE2 cannot run (published by an earlier release) instead of blaming the value', async () => {
    const published = await create('legacy', { field_schema: { type: 'string', pattern: '^.+$' } }, 'AnnotationSpec');
    const digest = published.json().digest;
    // As an earlier release stored it, when patterns ran on JavaScript's engine: with a lookahead.
    await sql`update trace_objects set val = jsonb_set(val, '{field_schema,pattern}', '"^(?!spam).+$"') where object_id = 'legacy'`.execute(app.db);
    const ref = `weave:///${project}/object/legacy:${digest}`;
    const response = await annotate('hello', { feedback_type: 'wandb.annotation.legacy', annotation_ref: ref });
    expect([response.statusCode, response.json()]).toEqual([
      400,
      {
        reason:
          `The annotation spec ${ref} cannot check values: Invalid AnnotationSpec.field_schema: not a valid JSON Schema (error parsing regexp: invalid or unsupported Perl syntax: \`(?!\`). ` +
          'It was stored by an earlier trainyard, whose patterns allowed lookaround and backreferences; patterns run on RE2 now, which has neither. Publish a new version of the spec without them, and annotate with that version.',
      },
    ]);
  });

  it('checks a field_schema pattern in time linear in the value, with ECMAScript escapes', async () => {
    // On a backtracking engine ^(a+)+$ against a run of a's and one more character takes 2^n steps:
    // a request with this value would hold the event loop (and this test) for good.
    const response = await create('code', { field_schema: { type: 'string', pattern: '^(a+)+$|^\\u00e9\\d{2}$' } }, 'AnnotationSpec');
    const code = { feedback_type: 'wandb.annotation.code', annotation_ref: `weave:///${project}/object/code:${response.json().digest}` };
    const refused = await annotate(`${'a'.repeat(50_000)}!`, code);
    expect([refused.statusCode, refused.json()]).toEqual([400, { reason: 'Feedback payload does not match annotation spec' }]);
    for (const value of ['a'.repeat(50_000), '\u00e942']) {
      const accepted = await annotate(value, code);
      expect(accepted.statusCode, accepted.body).toBe(200);
    }
  });
});
