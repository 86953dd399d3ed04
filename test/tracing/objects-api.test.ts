import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { basicAuth, lines, post } from './helpers.js';

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp({ TRACE_FILE_LIMIT_MB: '1' });
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('proj')}`;
});
afterAll(async () => {
  await app.close();
});

const create = async (objectId: string, val: unknown, extra: Record<string, unknown> = {}) =>
  post(app, user, '/obj/create', { obj: { project_id: project, object_id: objectId, val, ...extra } });

describe('service routes', () => {
  it('answer health and server_info without a key', async () => {
    expect((await app.inject({ method: 'GET', url: '/traces/health' })).json()).toEqual({ status: 'ok' });
    expect((await app.inject({ method: 'GET', url: '/traces/server_info' })).json()).toEqual({
      min_required_weave_python_version: '0.0.0',
      trace_server_version: '1.0.0',
    });
  });
});

describe('objects', () => {
  it('digest the value exactly as the reference vector, keeping 1.0 apart from 1', async () => {
    const response = await post(app, user, '/obj/create', `{"obj":{"project_id":"${project}","object_id":"vec","val":{"b":1,"a":[1.0,"x"],"c":"é"}}}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ digest: 'GPcXMCf7M26iQyy3KRSxCKANFPKXnkIauYsAkXfYYY0', object_id: 'vec' });
  });

  it('create a version per distinct value, idempotently, with latest and vN reads', async () => {
    const first = (await create('model', { _type: 'Model', _class_name: 'Model', _bases: ['Object', 'BaseModel'], n: 1 })).json();
    const again = (await create('model', { _type: 'Model', _class_name: 'Model', _bases: ['Object', 'BaseModel'], n: 1 })).json();
    const second = (await create('model', { _type: 'Model', _class_name: 'Model', _bases: ['Object', 'BaseModel'], n: 2 })).json();
    expect(again.digest).toBe(first.digest);
    expect(second.digest).not.toBe(first.digest);

    const latest = (await post(app, user, '/obj/read', { project_id: project, object_id: 'model', digest: 'latest' })).json().obj;
    expect(latest).toMatchObject({ object_id: 'model', digest: second.digest, version_index: 1, is_latest: 1, kind: 'object', base_object_class: 'Model', leaf_object_class: 'Model', val: { n: 2 } });
    expect(latest.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    const v0 = (await post(app, user, '/obj/read', { project_id: project, object_id: 'model', digest: 'v0' })).json().obj;
    expect(v0).toMatchObject({ digest: first.digest, version_index: 0, is_latest: 0 });
  });

  it('derive kind op and scorer classes', async () => {
    const op = (await create('my_op', { _type: 'CustomWeaveType', weave_type: { type: 'Op' }, files: { 'obj.py': 'x' }, load_op: 'NO_LOAD_OP' })).json();
    const scorer = (await create('correct', { _type: 'correct', _class_name: 'correct', _bases: ['Scorer', 'Object', 'BaseModel'] })).json();
    const objs = (await post(app, user, '/objs/query', { project_id: project, filter: { object_ids: ['my_op', 'correct'] } })).json().objs;
    expect(objs.map((o: Record<string, unknown>) => [o.object_id, o.kind, o.base_object_class, o.leaf_object_class, o.digest])).toEqual([
      ['my_op', 'op', null, null, op.digest],
      ['correct', 'object', 'Scorer', 'correct', scorer.digest],
    ]);
    const ops = (await post(app, user, '/objs/query', { project_id: project, filter: { is_op: true } })).json().objs;
    expect(ops.map((o: Record<string, unknown>) => o.object_id)).toEqual(['my_op']);
    const scorers = (await post(app, user, '/objs/query', { project_id: project, filter: { base_object_classes: ['Scorer'] }, metadata_only: true })).json().objs;
    expect(scorers).toHaveLength(1);
    expect(scorers[0].val).toEqual({});
  });

  it('set builtin classes and refuse a wrong expected_digest with 409', async () => {
    await create('spec', { name: 'x' }, { builtin_object_class: 'AnnotationSpec' });
    const read = (await post(app, user, '/obj/read', { project_id: project, object_id: 'spec', digest: 'latest' })).json().obj;
    expect([read.base_object_class, read.leaf_object_class]).toEqual(['AnnotationSpec', 'AnnotationSpec']);
    const response = await create('spec', { name: 'y' }, { expected_digest: 'nope' });
    expect(response.statusCode).toBe(409);
    expect(response.json().reason).toMatch(/^Digest mismatch: expected nope, computed [A-Za-z0-9]{43}\.$/);
  });

  it('reject a bad object id with 400', async () => {
    const response = await create('bad id!', {});
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ reason: `Invalid object_id "bad id!": use 1 to 128 letters, digits, '_', '-' and '.'.` });
  });

  it('query with latest_only, sort and limit/offset; reject other sort fields', async () => {
    for (const n of [1, 2]) await create('sorted-b', { n });
    await create('sorted-a', { n: 1 });
    const body = { project_id: project, filter: { object_ids: ['sorted-a', 'sorted-b'], latest_only: true }, sort_by: [{ field: 'object_id', direction: 'desc' }] };
    const objs = (await post(app, user, '/objs/query', body)).json().objs;
    expect(objs.map((o: Record<string, unknown>) => [o.object_id, o.version_index])).toEqual([['sorted-b', 1], ['sorted-a', 0]]);
    const paged = (await post(app, user, '/objs/query', { ...body, limit: 1, offset: 1 })).json().objs;
    expect(paged.map((o: Record<string, unknown>) => o.object_id)).toEqual(['sorted-a']);
    const bad = await post(app, user, '/objs/query', { project_id: project, sort_by: [{ field: 'digest', direction: 'asc' }] });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ reason: 'Cannot sort objects by "digest": use object_id or created_at.' });
  });

  it('delete softly: indices stay, latest moves, deleted reads are 404 with deleted_at', async () => {
    const a = (await create('doomed', { n: 1 })).json();
    const b = (await create('doomed', { n: 2 })).json();
    const deleted = await post(app, user, '/obj/delete', { project_id: project, object_id: 'doomed', digests: [b.digest] });
    expect(deleted.json()).toEqual({ num_deleted: 1 });
    const latest = (await post(app, user, '/obj/read', { project_id: project, object_id: 'doomed', digest: 'latest' })).json().obj;
    expect(latest).toMatchObject({ digest: a.digest, version_index: 0, is_latest: 1 });
    const gone = await post(app, user, '/obj/read', { project_id: project, object_id: 'doomed', digest: b.digest });
    expect(gone.statusCode).toBe(404);
    const { deleted_at: deletedAt } = gone.json();
    expect(gone.json()).toEqual({ reason: `doomed:v1 was deleted at ${deletedAt}`, deleted_at: deletedAt });
    const again = await post(app, user, '/obj/delete', { project_id: project, object_id: 'doomed', digests: [b.digest] });
    expect(again.statusCode).toBe(404);
    expect(again.json()).toEqual({ reason: `Object doomed has no live version with digest ${b.digest}` });
    expect((await post(app, user, '/obj/delete', { project_id: project, object_id: 'doomed' })).json()).toEqual({ num_deleted: 1 });
    expect((await post(app, user, '/obj/delete', { project_id: project, object_id: 'doomed' })).json()).toEqual({ reason: 'Object doomed not found' });
    const v2 = (await create('doomed', { n: 3 })).json();
    const after = (await post(app, user, '/obj/read', { project_id: project, object_id: 'doomed', digest: 'latest' })).json().obj;
    expect(after).toMatchObject({ digest: v2.digest, version_index: 2 });
  });

  it('answer 404 for a missing object', async () => {
    const response = await post(app, user, '/obj/read', { project_id: project, object_id: 'nothing', digest: 'latest' });
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({ reason: 'Obj nothing:latest not found' });
  });

  it('refuse * as the version to read, as refs do', async () => {
    await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'starred', val: { n: 1 } } });
    const response = await post(app, user, '/obj/read', { project_id: project, object_id: 'starred', digest: '*' });
    expect([response.statusCode, response.json()]).toEqual([400, { reason: 'Obj starred:* must name a version (a digest, latest, v<N> or an alias), not *.' }]);
  });
});

describe('tables', () => {
  const rows = [{ a: 1, b: 'x' }, { a: 2, b: 'y' }];

  it('match the reference table and row digest vectors', async () => {
    const response = await post(app, user, '/table/create', { table: { project_id: project, rows } });
    expect(response.json()).toEqual({
      digest: '6b228fced812d62e4bd62387f89ac293f2f35a5b6dd8fcdd336fb988405149ad',
      row_digests: ['zlxib7QDB0J88yO1wwej6iMIVvpLrWduqqJXe1qFeoU', 'aOKgoWuvTKTF7UCq5BFm75w7srj72lul43xQpqXX1Fo'],
    });
    const empty = await post(app, user, '/table/create', { table: { project_id: project, rows: [] } });
    expect(empty.json().digest).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });

  it('keep duplicates in insertion order, filter, sort by paths with missing last, page', async () => {
    const t = (await post(app, user, '/table/create', { table: { project_id: project, rows: [{ k: 3, s: { v: 'c' } }, { k: 1 }, { k: 3, s: { v: 'c' } }, { k: 2, s: { v: 'a' } }] } })).json();
    const all = (await post(app, user, '/table/query', { project_id: project, digest: t.digest })).json().rows;
    expect(all.map((r: Record<string, unknown>) => [r.val, r.original_index])).toEqual([
      [{ k: 3, s: { v: 'c' } }, 0],
      [{ k: 1 }, 1],
      [{ k: 3, s: { v: 'c' } }, 2],
      [{ k: 2, s: { v: 'a' } }, 3],
    ]);
    expect(all.map((r: Record<string, unknown>) => r.digest)).toEqual(t.row_digests);
    const sorted = (await post(app, user, '/table/query', { project_id: project, digest: t.digest, sort_by: [{ field: 's.v', direction: 'asc' }] })).json().rows;
    expect(sorted.map((r: Record<string, unknown>) => r.original_index)).toEqual([3, 0, 2, 1]);
    const desc = (await post(app, user, '/table/query', { project_id: project, digest: t.digest, sort_by: [{ field: 'k', direction: 'desc' }], limit: 2, offset: 1 })).json().rows;
    expect(desc.map((r: Record<string, unknown>) => r.original_index)).toEqual([2, 3]);
    const filtered = (await post(app, user, '/table/query', { project_id: project, digest: t.digest, filter: { row_digests: [t.row_digests[0]] } })).json().rows;
    expect(filtered.map((r: Record<string, unknown>) => r.original_index)).toEqual([0, 2]);
    const stream = await post(app, user, '/table/query_stream', { project_id: project, digest: t.digest });
    expect(stream.headers['content-type']).toMatch(/^application\/jsonl/);
    expect(lines(stream.body)).toEqual(all);
    expect((await post(app, user, '/table/query_stats', { project_id: project, digest: t.digest })).json()).toEqual({ count: 4 });
    const batch = (await post(app, user, '/table/query_stats_batch', { project_id: project, digests: [t.digest, 'unknown'], include_storage_size: true })).json();
    expect(batch.tables).toEqual([{ digest: t.digest, count: 4, storage_size_bytes: expect.any(Number) }]);
  });

  it('page rows in insertion order by offset, as weave\'s SDK reads a dataset, duplicates and positions kept', async () => {
    const values = Array.from({ length: 23 }, (_, i) => ({ i: i % 10 })); // 10 distinct rows, repeated
    const t = (await post(app, user, '/table/create', { table: { project_id: project, rows: values } })).json();
    const query = async (body: Record<string, unknown>) => {
      const response = await post(app, user, '/table/query', { project_id: project, digest: t.digest, ...body });
      expect(response.statusCode, response.body).toBe(200);
      return response.json().rows.map((r: Record<string, unknown>) => [r.val, r.original_index, r.digest]);
    };
    const all = await query({});
    expect(all).toEqual(values.map((value, i) => [value, i, t.row_digests[i]]));
    const paged = [];
    for (let offset = 0; offset < 30; offset += 5) paged.push(...(await query({ limit: 5, offset })));
    expect(paged).toEqual(all);
    expect(await query({ offset: 20 })).toEqual(all.slice(20));
    expect(await query({ limit: 0, offset: 3 })).toEqual([]);
    expect(await query({ limit: 2 ** 40, offset: 2 ** 40 })).toEqual([]);
    expect(await query({ limit: 2 ** 40, offset: 21 })).toEqual(all.slice(21));
  });

  it('answer an unknown table with no rows and an empty stream', async () => {
    expect((await post(app, user, '/table/query', { project_id: project, digest: 'nope' })).json()).toEqual({ rows: [] });
    expect((await post(app, user, '/table/query_stream', { project_id: project, digest: 'nope' })).body).toBe('');
  });

  it('apply append, pop and insert in order', async () => {
    const base = (await post(app, user, '/table/create', { table: { project_id: project, rows } })).json();
    const response = await post(app, user, '/table/update', {
      project_id: project,
      base_digest: base.digest,
      updates: [{ append: { row: { a: 3 } } }, { pop: { index: 0 } }, { insert: { index: 1, row: { a: 9 } } }],
    });
    const updated = response.json();
    const vals = (await post(app, user, '/table/query', { project_id: project, digest: updated.digest })).json().rows.map((r: Record<string, unknown>) => r.val);
    expect(vals).toEqual([{ a: 2, b: 'y' }, { a: 9 }, { a: 3 }]);
    // The appended, popped and inserted rows, in update order.
    const digestOf = new Map((await post(app, user, '/table/query', { project_id: project, digest: updated.digest })).json().rows.map((r: Record<string, any>) => [r.val.a, r.digest]));
    expect(updated.updated_row_digests).toEqual([digestOf.get(3), base.row_digests[0], digestOf.get(9)]);
    const bad = await post(app, user, '/table/update', { project_id: project, base_digest: base.digest, updates: [{ pop: { index: 5 } }] });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ reason: 'updates[0].pop: index 5 is out of range for a table of 2 rows.' });
  });

  it('reject non-object rows with 400 and build tables from stored row digests', async () => {
    const bad = await post(app, user, '/table/create', { table: { project_id: project, rows: [1] } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ reason: 'rows[0]: every table row must be a JSON object.' });
    const t = (await post(app, user, '/table/create', { table: { project_id: project, rows } })).json();
    const fromDigests = await post(app, user, '/table/create_from_digests', { project_id: project, row_digests: [...t.row_digests].reverse() });
    const reversed = (await post(app, user, '/table/query', { project_id: project, digest: fromDigests.json().digest })).json().rows;
    expect(reversed.map((r: Record<string, unknown>) => r.val)).toEqual([rows[1], rows[0]]);
    const missing = await post(app, user, '/table/create_from_digests', { project_id: project, row_digests: ['nope'] });
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ reason: `Row digests not found in ${project}: nope` });
  });
});

describe('files', () => {
  const source = 'async function evaluate(evaluation, model) {\n    // internal function\n}';

  function multipart(fields: Record<string, string>, file?: { content: Buffer | string; name?: string }) {
    const boundary = '----trainyard';
    const parts: Buffer[] = [];
    for (const [name, value] of Object.entries(fields)) {
      parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
    }
    if (file) {
      parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${file.name ?? 'blob'}"\r\nContent-Type: application/octet-stream\r\n\r\n`));
      parts.push(Buffer.isBuffer(file.content) ? file.content : Buffer.from(file.content));
      parts.push(Buffer.from('\r\n'));
    }
    parts.push(Buffer.from(`--${boundary}--\r\n`));
    return { payload: Buffer.concat(parts), headers: { authorization: basicAuth(user.key), 'content-type': `multipart/form-data; boundary=${boundary}` } };
  }

  it('store uploads under the digest the JS client computes and serve the bytes back on both paths', async () => {
    for (const url of ['/traces/file/create', '/traces/files/create']) {
      const response = await app.inject({ method: 'POST', url, ...multipart({ project_id: project }, { content: source }) });
      expect(response.json()).toEqual({ digest: '3OUF6UTy5teWXJ6xECCbfG8dmXXEkazBTpQfX19lwWM' });
    }
    for (const url of ['/file/content', '/files/content']) {
      const content = await post(app, user, url, { project_id: project, digest: '3OUF6UTy5teWXJ6xECCbfG8dmXXEkazBTpQfX19lwWM' });
      expect(content.headers['content-type']).toBe('application/octet-stream');
      expect(content.body).toBe(source);
    }
    const binary = Buffer.from([0, 255, 1, 254]);
    const stored = (await app.inject({ method: 'POST', url: '/traces/file/create', ...multipart({ project_id: project }, { content: binary }) })).json();
    expect((await post(app, user, '/file/content', { project_id: project, digest: stored.digest })).rawPayload).toEqual(binary);
  });

  it('refuse a file over the limit with 413 and store nothing', async () => {
    const before = await databaseFingerprint(app);
    const response = await app.inject({ method: 'POST', url: '/traces/file/create', ...multipart({ project_id: project }, { content: Buffer.alloc(1024 * 1024 + 1) }) });
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({ reason: `The file is larger than the limit of ${1024 * 1024} bytes (TRACE_FILE_LIMIT_MB).` });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('answer a missing file with 404, a missing field with 422 and a JSON upload with 400', async () => {
    const missing = await post(app, user, '/file/content', { project_id: project, digest: 'nope' });
    expect([missing.statusCode, missing.json()]).toEqual([404, { reason: 'File nope not found' }]);
    const noFile = await app.inject({ method: 'POST', url: '/traces/file/create', ...multipart({ project_id: project }) });
    expect(noFile.statusCode).toBe(422);
    expect(noFile.json().detail[0]).toMatchObject({ type: 'missing', loc: ['body', 'file'] });
    const json = await post(app, user, '/file/create', { project_id: project });
    expect([json.statusCode, json.json()]).toEqual([400, { reason: 'Send the file as multipart/form-data with fields project_id and file.' }]);
  });
});

describe('refs/read_batch', () => {
  it('resolve object refs with key, attr, index and id edges, nested refs, and deleted objects as null', async () => {
    const table = (await post(app, user, '/table/create', { table: { project_id: project, rows: [{ q: 'hi' }, { q: 'yo' }] } })).json();
    const ds = (await create('ds', { _type: 'Dataset', _class_name: 'Dataset', _bases: ['Object', 'BaseModel'], rows: `weave:///${project}/table/${table.digest}` })).json();
    const inner = (await create('inner', { deep: { list: [10, 20, 30] } })).json();
    const outer = (await create('outer', { child: `weave:///${project}/object/inner:${inner.digest}`, name: 'o' })).json();
    const gone = (await create('gone', { x: 1 })).json();
    await post(app, user, '/obj/delete', { project_id: project, object_id: 'gone' });

    const refs = [
      `weave:///${project}/object/ds:${ds.digest}/attr/rows/id/${table.row_digests[1]}`,
      `weave:///${project}/object/outer:${outer.digest}/key/name`,
      `weave:///${project}/object/outer:${outer.digest}/attr/child/key/deep/key/list/index/2`,
      `weave:///${project}/object/gone:${gone.digest}`,
      `weave:///${project}/object/outer:${outer.digest}/key/missing`,
      `weave:///${project}/object/outer:${outer.digest}`,
    ];
    const response = await post(app, user, '/refs/read_batch', { refs });
    expect(response.json()).toEqual({ vals: [{ q: 'yo' }, 'o', 30, null, null, { child: `weave:///${project}/object/inner:${inner.digest}`, name: 'o' }] });
  });

  it('answer 404 for a missing object, 400 for table refs, other projects and more than 1000 refs', async () => {
    const missing = await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/object/none:abc`] });
    expect([missing.statusCode, missing.json()]).toEqual([404, { reason: 'Obj none:abc not found' }]);
    const table = await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/table/abc`] });
    expect([table.statusCode, table.json()]).toEqual([400, { reason: `Ref weave:///${project}/table/abc is a table ref; read_batch reads object and op refs.` }]);
    const other = `${user.entity}/another`;
    const mixed = await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/object/a:b`, `weave:///${other}/object/a:b`] });
    expect([mixed.statusCode, mixed.json()]).toEqual([400, { reason: `Ref weave:///${other}/object/a:b names project ${other}; only refs into ${project} can be resolved here.` }]);
    const many = await post(app, user, '/refs/read_batch', { refs: Array.from({ length: 1001 }, () => `weave:///${project}/object/a:b`) });
    expect([many.statusCode, many.json()]).toEqual([400, { reason: 'Cannot read more than 1000 refs at once (got 1001); split the request.' }]);
  });

  it('refuse a nested ref into another project with 400', async () => {
    const foreign = (await create('foreign-holder', { link: `weave:///${user.entity}/elsewhere/object/x:abc` })).json();
    const response = await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/object/foreign-holder:${foreign.digest}/key/link/key/a`] });
    expect(response.statusCode).toBe(400);
    expect(response.json().reason).toContain(`names project ${user.entity}/elsewhere`);
  });
});
