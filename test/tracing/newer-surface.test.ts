import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { callItems, lines, post } from './helpers.js';

/** weave's newer surface: /project/stats, $containsToken, refs by alias. */

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('newer')}`;

describe('/project/stats', () => {
  it('answers the bytes stored for calls, objects, table rows and files; left-out parts are 0', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', inputs: { q: 'hi' }, output: 'ok' }) });
    await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'o', val: { a: 1 } } });
    await post(app, user, '/table/create', { table: { project_id: project, rows: [{ a: 1 }, { b: 2 }] } });
    const response = await post(app, user, '/project/stats', { project_id: project });
    expect(response.statusCode, response.body).toBe(200);
    // JSON text as stored: {} + {"q": "hi"} + "ok" + {} ; {"a": 1} ; {"a": 1} {"b": 2}
    expect(response.json()).toEqual({ trace_storage_size_bytes: 19, objects_storage_size_bytes: 8, tables_storage_size_bytes: 16, files_storage_size_bytes: 0 });
    const some = await post(app, user, '/project/stats', { project_id: project, include_trace_storage_size: false, include_table_storage_size: false });
    expect(some.json()).toEqual({ trace_storage_size_bytes: 0, objects_storage_size_bytes: 8, tables_storage_size_bytes: 0, files_storage_size_bytes: 0 });
  });

  it('refuses another entity\'s project with 403', async () => {
    const other = await createUserWithKey(app);
    const response = await post(app, user, '/project/stats', { project_id: `${other.entity}/p` });
    expect(response.statusCode).toBe(403);
  });
});

describe('$containsToken', () => {
  it('matches whole tokens split on ASCII non-alphanumerics, optionally ignoring case', async () => {
    const project = newProject();
    const names = ['my-llm call', 'llmcall', 'LLM', 'the llm.', 'other'];
    const batch = names.flatMap((display_name, i) => callItems(project, { id: `c${i}`, display_name }));
    expect((await post(app, user, '/call/upsert_batch', { batch })).statusCode).toBe(200);
    const matching = async (caseInsensitive: boolean) => {
      const query = { $expr: { $containsToken: { input: { $getField: 'display_name' }, substr: { $literal: 'llm' }, case_insensitive: caseInsensitive } } };
      const response = await post(app, user, '/calls/stream_query', { project_id: project, query });
      expect(response.statusCode, response.body).toBe(200);
      return lines(response.body).map((c) => c.display_name);
    };
    expect(await matching(false)).toEqual(['my-llm call', 'the llm.']);
    expect(await matching(true)).toEqual(['my-llm call', 'LLM', 'the llm.']);
  });
});

describe('refs and reads by alias', () => {
  it('reads latest and v<N> through /obj/read and /refs/read_batch', async () => {
    const project = newProject();
    for (const n of [1, 2]) await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'cfg', val: { n } } });
    for (const [alias, n] of [['latest', 2], ['v0', 1], ['v1', 2]] as const) {
      const obj = (await post(app, user, '/obj/read', { project_id: project, object_id: 'cfg', digest: alias })).json().obj;
      expect(obj.val).toEqual({ n });
    }
    const refs = ['latest', 'v0', 'v1'].map((alias) => `weave:///${project}/object/cfg:${alias}`);
    const response = await post(app, user, '/refs/read_batch', { refs });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ vals: [{ n: 2 }, { n: 1 }, { n: 2 }] });
    const missing = await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/object/cfg:v7`] });
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ reason: 'Obj cfg:v7 not found' });
  });
});
