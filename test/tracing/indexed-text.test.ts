import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { post } from './helpers.js';

/**
 * Text the database indexes after the project id is bounded in bytes of UTF-8, since 2,048 characters of
 * CJK text pass past what PostgreSQL takes in an index entry: the client's error names the field, and
 * nothing is stored, where the database's refusal named nothing.
 */

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('indexed')}`;
  // A key's first use records its last-use time; made here so that the fingerprints compare refusals only.
  await post(app, user, '/objs/query', { project_id: project });
});
afterAll(async () => {
  await app.close();
});

/** 2,001 bytes of UTF-8 in 667 characters. */
const cjk = (prefix: string) => `${prefix}${'語'.repeat(Math.ceil((2001 - prefix.length) / 3))}`;

describe('indexed text past 2,000 bytes', () => {
  it('a feedback weave_ref is a 422 naming it', async () => {
    const before = await databaseFingerprint(app);
    const ref = cjk(`weave:///${project}/call/`);
    const response = await post(app, user, '/feedback/create', { project_id: project, weave_ref: ref, feedback_type: 'wandb.note.1', payload: { note: 'x' } });
    expect([response.statusCode, response.json()]).toEqual([
      422,
      { detail: [{ type: 'value_error', loc: ['body', 'weave_ref'], msg: 'Value error, weave_ref takes at most 2000 bytes of UTF-8', input: ref, ctx: { error: 'weave_ref takes at most 2000 bytes of UTF-8' } }] },
    ]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('a cost llm_id is a 422 naming it', async () => {
    const before = await databaseFingerprint(app);
    const llm = cjk('model-');
    const response = await post(app, user, '/cost/create', { project_id: project, costs: { [llm]: { prompt_token_cost: 0.01, completion_token_cost: 0.02 } } });
    expect([response.statusCode, response.json()]).toEqual([
      422,
      { detail: [{ type: 'value_error', loc: ['body', 'costs', llm, '[key]'], msg: 'Value error, llm_id takes at most 2000 bytes of UTF-8', input: llm, ctx: { error: 'llm_id takes at most 2000 bytes of UTF-8' } }] },
    ]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('an object base class is a 400 that says so', async () => {
    const before = await databaseFingerprint(app);
    // Random text, which an index entry cannot compress.
    const base = randomBytes(3000).toString('base64');
    const response = await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'model', val: { _class_name: 'M', _bases: [base, 'Object', 'BaseModel'] } } });
    expect([response.statusCode, response.json()]).toEqual([400, { reason: 'The object\'s base class name (from _bases or _class_name) takes more than 2000 bytes of UTF-8.' }]);
    expect(await databaseFingerprint(app)).toEqual(before);
    const fine = await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'model', val: { _class_name: 'M', _bases: ['Model', 'Object', 'BaseModel'] } } });
    expect(fine.statusCode).toBe(200);
  });
});
