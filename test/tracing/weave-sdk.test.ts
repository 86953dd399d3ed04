import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { post, runWeaveFixture } from './helpers.js';

let app: App;
let user: TestUser;
let project: string;
let seen: Record<string, any>;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('sdk')}`;
  const baseUrl = await listen(app);
  seen = await runWeaveFixture('test/tracing/fixtures/weave-client.ts', { baseUrl, key: user.key, project });
}, 120_000);
afterAll(async () => {
  await app.close();
});

describe('the npm weave SDK against trainyard', () => {
  it('traces nested ops and the thrown exception, and reads them back with getCalls filters', async () => {
    expect(seen.result).toBe(11);
    expect(seen.outer).toEqual([{ id: expect.any(String), display_name: 'renamed outer', op_name: expect.stringMatching(new RegExp(`^weave:///${project}/op/outer:[A-Za-z0-9]{43}$`)), inputs: { arg0: 5 }, output: 11, status: 'success' }]);
    expect(seen.roots).toEqual([seen.outer[0].id]);
    expect(seen.children).toEqual([
      { op_name: expect.stringContaining('/op/inner:'), exception: null, output: 10 },
      { op_name: expect.stringContaining('/op/failing:'), exception: 'bad input 10', output: null },
    ]);
  });

  it('stored the calls with their trace, parent and display name', async () => {
    const outerId = seen.outer[0].id;
    const { call } = (await post(app, user, '/call/read', { project_id: project, id: outerId })).json();
    const response = await post(app, user, '/calls/query', { project_id: project, filter: { trace_ids: [call.trace_id] } });
    const calls = response.json().calls as Record<string, any>[];
    expect(calls).toHaveLength(3);
    const root = calls.find((c) => c.id === outerId)!;
    expect(root).toMatchObject({ display_name: 'renamed outer', parent_id: null, summary: { weave: { status: 'success', trace_name: 'renamed outer' } } });
    expect(root.attributes.weave).toMatchObject({ source: 'js-sdk' });
    const failing = calls.find((c) => c.op_name.includes('/op/failing:'))!;
    expect(failing).toMatchObject({ parent_id: outerId, trace_id: root.trace_id, exception: 'bad input 10', summary: { weave: { status: 'error' } } });
  });

  it('published an object and an op with the digests the SDK uses in its refs', async () => {
    const digest = seen.configUri.split(':').pop();
    const obj = (await post(app, user, '/obj/read', { project_id: project, object_id: 'my-config', digest })).json().obj;
    expect(obj.val).toMatchObject({ name: 'cfg', temperature: 0.7, tags: ['a', 'b'] });
    expect(seen.configBack).toMatchObject({ name: 'cfg', temperature: 0.7 });
    const ops = (await post(app, user, '/objs/query', { project_id: project, filter: { is_op: true } })).json().objs as Record<string, any>[];
    expect(ops.map((o) => o.object_id).sort()).toEqual(['failing', 'inner', 'outer']);
    const outerDigest = seen.outer[0].op_name.split(':').pop();
    expect(ops.find((o) => o.object_id === 'outer')?.digest).toBe(outerDigest);
    const source = await post(app, user, '/file/content', { project_id: project, digest: ops[0].val.files['obj.py'] });
    expect(source.statusCode).toBe(200);
  });

  it('saved a dataset whose rows read back through its ref', async () => {
    expect(seen.rows).toEqual([{ q: 'hi', a: 1 }, { q: 'yo', a: 2.5 }]);
    const [uri] = [seen.datasetUri as string];
    const refs = await post(app, user, '/refs/read_batch', { refs: [uri] });
    const val = refs.json().vals[0];
    expect(val).toMatchObject({ _type: 'Dataset', rows: expect.stringMatching(new RegExp(`^weave:///${project}/table/[0-9a-f]{64}$`)) });
  });
});
