import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, uniqueName, type TestUser } from '../helpers/app.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused } from '../helpers/tenants.js';
import { basicAuth, post } from './helpers.js';

/** Tags and aliases of object versions, with the routes and shapes of weave's trace server. */

let app: App;
let owner: TestUser;
let other: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  ({ owner, other } = await createTenants(app));
  project = `${owner.entity}/${uniqueName('labels')}`;
});
afterAll(async () => {
  await app.close();
});

const send = (method: 'PUT' | 'POST' | 'GET', url: string, body?: unknown, as: TestUser = owner) =>
  app.inject({
    method,
    url: `/traces${url}`,
    headers: { authorization: basicAuth(as.key), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });

const addTags = (objectId: string, digest: string, tags: string[]) => send('PUT', `/objs/${objectId}/versions/${digest}/tags`, { project_id: project, tags });
const removeTags = (objectId: string, digest: string, tags: string[]) =>
  send('POST', `/objs/${objectId}/versions/${digest}/tags/remove`, { project_id: project, tags });
const setAliases = (objectId: string, digest: string, aliases: string[]) => send('PUT', `/objs/${objectId}/aliases`, { project_id: project, digest, aliases });
const removeAliases = (objectId: string, aliases: string[]) => send('POST', `/objs/${objectId}/aliases/remove`, { project_id: project, aliases });

/** Publishes the values as versions of a fresh object id; returns it and the digests in order. */
async function publish(...vals: unknown[]): Promise<{ id: string; digests: string[] }> {
  const id = uniqueName('obj');
  const digests: string[] = [];
  for (const val of vals) {
    const response = await post(app, owner, '/obj/create', { obj: { project_id: project, object_id: id, val } });
    expect(response.statusCode, response.body).toBe(200);
    digests.push(response.json().digest);
  }
  return { id, digests };
}

const read = async (objectId: string, digest: string, extra: Record<string, unknown> = { include_tags_and_aliases: true }) => {
  const response = await post(app, owner, '/obj/read', { project_id: project, object_id: objectId, digest, ...extra });
  expect(response.statusCode, response.body).toBe(200);
  return response.json().obj;
};

const query = async (filter: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
  const response = await post(app, owner, '/objs/query', { project_id: project, filter, ...extra });
  expect(response.statusCode, response.body).toBe(200);
  return response.json().objs as Record<string, unknown>[];
};

const ok = (response: { statusCode: number; body: string; json: () => unknown }) => {
  expect(response.statusCode, response.body).toBe(200);
  expect(response.json()).toEqual({});
};

describe('tags', () => {
  it('are added, deduplicated, read back in byte order and removed, per version', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    ok(await addTags(id, digests[0], ['staging', 'Reviewed', 'staging', 'has spaces']));
    ok(await addTags(id, digests[0], ['staging'])); // again: nothing changes
    expect((await read(id, digests[0])).tags).toEqual(['Reviewed', 'has spaces', 'staging']);
    expect((await read(id, digests[1])).tags).toEqual([]);

    ok(await removeTags(id, digests[0], ['staging', 'never-added']));
    expect((await read(id, digests[0])).tags).toEqual(['Reviewed', 'has spaces']);
  });

  it('"latest" and "v0" are valid tag names, and v<N> or latest name the version to tag', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    ok(await addTags(id, 'latest', ['latest', 'v0']));
    ok(await addTags(id, 'v0', ['old']));
    expect((await read(id, digests[1])).tags).toEqual(['latest', 'v0']);
    expect((await read(id, digests[0])).tags).toEqual(['old']);
  });

  it('on a version that does not exist or is deleted answer 404', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    const missing = await addTags(id, 'A'.repeat(43), ['x']);
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ reason: `Object version ${id}:${'A'.repeat(43)} not found` });
    expect((await post(app, owner, '/obj/delete', { project_id: project, object_id: id, digests: [digests[0]] })).statusCode).toBe(200);
    expect((await addTags(id, digests[0], ['x'])).json()).toEqual({ reason: `Object version ${id}:${digests[0]} not found` });
    ok(await removeTags(id, digests[0], ['x'])); // removing from nothing changes nothing
  });

  it('are listed per project, distinct and in byte order', async () => {
    const listProject = `${owner.entity}/${uniqueName('list')}`;
    const list = async (what: 'tags' | 'aliases') => (await send('GET', `/${what}?project_id=${encodeURIComponent(listProject)}`)).json();
    expect(await list('tags')).toEqual({ tags: [] });
    expect(await list('aliases')).toEqual({ aliases: [] });
    const a = (await post(app, owner, '/obj/create', { obj: { project_id: listProject, object_id: 'a', val: 1 } })).json().digest;
    const b = (await post(app, owner, '/obj/create', { obj: { project_id: listProject, object_id: 'b', val: 2 } })).json().digest;
    for (const [objectId, digest, tags] of [['a', a, ['beta', 'alpha']], ['b', b, ['alpha', 'Gamma']]] as const) {
      ok(await send('PUT', `/objs/${objectId}/versions/${digest}/tags`, { project_id: listProject, tags }));
    }
    ok(await send('PUT', '/objs/a/aliases', { project_id: listProject, digest: a, aliases: ['production'] }));
    ok(await send('PUT', '/objs/b/aliases', { project_id: listProject, digest: b, aliases: ['canary', 'production'] }));
    expect(await list('tags')).toEqual({ tags: ['Gamma', 'alpha', 'beta'] });
    expect(await list('aliases')).toEqual({ aliases: ['canary', 'production'] });

    ok(await send('POST', `/objs/a/versions/${a}/tags/remove`, { project_id: listProject, tags: ['beta'] }));
    ok(await send('POST', '/objs/b/aliases/remove', { project_id: listProject, aliases: ['canary'] }));
    expect(await list('tags')).toEqual({ tags: ['Gamma', 'alpha'] });
    expect(await list('aliases')).toEqual({ aliases: ['production'] });
  });
});

describe('aliases', () => {
  it('name one version per object: setting one again moves it', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 }, { v: 2 });
    ok(await setAliases(id, digests[0], ['staging', 'stable']));
    expect((await read(id, digests[0])).aliases).toEqual(['stable', 'staging']);
    ok(await setAliases(id, digests[1], ['staging']));
    expect((await read(id, digests[0])).aliases).toEqual(['stable']);
    expect((await read(id, digests[1])).aliases).toEqual(['staging']);
    expect((await read(id, 'staging')).val).toEqual({ v: 1 });
    // The latest version carries the virtual "latest" first.
    ok(await setAliases(id, digests[2], ['prod']));
    expect((await read(id, digests[2])).aliases).toEqual(['latest', 'prod']);
  });

  it('are per object id: the same alias on two objects names a version of each', async () => {
    const first = await publish({ a: 1 });
    const second = await publish({ b: 1 });
    ok(await setAliases(first.id, first.digests[0], ['prod']));
    ok(await setAliases(second.id, second.digests[0], ['prod']));
    ok(await removeAliases(first.id, ['prod', 'never-set']));
    const missing = await post(app, owner, '/obj/read', { project_id: project, object_id: first.id, digest: 'prod' });
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ reason: `Obj ${first.id}:prod not found` });
    expect((await read(second.id, 'prod')).val).toEqual({ b: 1 });
  });

  it('resolve in /obj/read to the version they name, with its real digest', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    ok(await setAliases(id, digests[0], ['production']));
    const obj = await read(id, 'production', {});
    expect(obj).toMatchObject({ object_id: id, digest: digests[0], version_index: 0, is_latest: 0, val: { v: 0 } });
    expect(obj).not.toHaveProperty('tags');
    expect(obj).not.toHaveProperty('aliases');
  });

  it('resolve in /refs/read_batch, next to latest, v<N> and digests; an unknown alias is a 404', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    ok(await setAliases(id, digests[0], ['pinned']));
    const ref = (version: string) => `weave:///${project}/object/${id}:${version}`;
    const response = await post(app, owner, '/refs/read_batch', { refs: [ref('pinned'), ref('latest'), ref('v0'), ref(digests[1])] });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ vals: [{ v: 0 }, { v: 1 }, { v: 0 }, { v: 1 }] });

    const missing = await post(app, owner, '/refs/read_batch', { refs: [ref('nowhere')] });
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ reason: `Obj ${id}:nowhere not found` });
  });

  it('reserved or malformed names answer 400 with weave\'s reason and change nothing', async () => {
    const { id, digests } = await publish({ v: 0 });
    const cases: [() => ReturnType<typeof send>, string][] = [
      [() => setAliases(id, digests[0], ['latest']), "alias name 'latest' is reserved"],
      [() => setAliases(id, digests[0], ['ok', 'v12']), "alias name 'v12' is reserved (matches version pattern v<number>)"],
      [() => setAliases(id, digests[0], ['a:b']), "alias name cannot contain character ':'"],
      [() => setAliases(id, digests[0], ['a/b']), "alias name cannot contain character '/'"],
      [() => setAliases(id, digests[0], ['  ']), 'alias name must not be whitespace-only'],
      [() => setAliases(id, digests[0], ['']), 'alias name must not be empty'],
      [() => setAliases(id, digests[0], ['x'.repeat(129)]), 'alias name must be at most 128 characters'],
      [() => removeAliases(id, ['latest']), "alias name 'latest' is reserved"],
      [() => addTags(id, digests[0], ['my.tag']), 'tag name "my.tag" is invalid: only alphanumeric characters, hyphens, underscores, and single spaces between words are allowed'],
      [() => addTags(id, digests[0], ['two  spaces']), 'tag name "two  spaces" is invalid: only alphanumeric characters, hyphens, underscores, and single spaces between words are allowed'],
      [() => addTags(id, digests[0], ['']), 'tag name must not be empty'],
      [() => addTags(id, digests[0], ['t'.repeat(257)]), 'tag name must be at most 256 characters'],
      [() => removeTags(id, digests[0], [' lead']), 'tag name " lead" is invalid: only alphanumeric characters, hyphens, underscores, and single spaces between words are allowed'],
    ];
    const before = await databaseFingerprint(app);
    for (const [request, reason] of cases) {
      const response = await request();
      expect(response.statusCode, reason).toBe(400);
      expect(response.json()).toEqual({ reason });
    }
    expect(await databaseFingerprint(app)).toEqual(before);
    ok(await setAliases(id, digests[0], ['my-deploy.v2', 'has spaces', 'a'.repeat(128)]));
    ok(await addTags(id, digests[0], ['t'.repeat(256), 'ünïcode_tag']));
  });

  it('a list past its bound answers 422 naming the field', async () => {
    const response = await addTags('x', 'y', Array.from({ length: 1001 }, (_, i) => `t${i}`));
    expect(response.statusCode).toBe(422);
    expect(response.json().detail[0]).toMatchObject({ loc: ['body', 'tags'], msg: 'List should have at most 1000 items after validation, not 1001' });
  });

  it('long object ids in the path reach the API (a 128-character id is a 404, over 256 a 422), never a bare 414', async () => {
    const long = 'o'.repeat(128);
    const missing = await addTags(long, 'A'.repeat(43), ['x']);
    expect([missing.statusCode, missing.json()]).toEqual([404, { reason: `Object version ${long}:${'A'.repeat(43)} not found` }]);
    const tooLong = await addTags('o'.repeat(257), 'A'.repeat(43), ['x']);
    expect(tooLong.statusCode).toBe(422);
    expect(tooLong.json().detail[0]).toMatchObject({ loc: ['path', 'object_id'], msg: 'String should have at most 256 characters' });
  });
});

describe('include_tags_and_aliases and filters', () => {
  it('objs/query returns tags and aliases only when asked, and filters by tags (any) and aliases', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 }, { v: 2 });
    ok(await addTags(id, digests[0], ['alpha']));
    ok(await addTags(id, digests[1], ['beta']));
    ok(await setAliases(id, digests[1], ['pinned']));

    const plain = await query({ object_ids: [id] });
    expect(plain.map((o) => [o.tags, o.aliases])).toEqual([
      [undefined, undefined],
      [undefined, undefined],
      [undefined, undefined],
    ]);
    const labelled = await query({ object_ids: [id] }, { include_tags_and_aliases: true, metadata_only: true });
    expect(labelled.map((o) => [o.version_index, o.tags, o.aliases])).toEqual([
      [0, ['alpha'], []],
      [1, ['beta'], ['pinned']],
      [2, [], ['latest']],
    ]);

    const versions = async (filter: Record<string, unknown>) => (await query({ object_ids: [id], ...filter })).map((o) => o.version_index);
    expect(await versions({ tags: ['alpha', 'beta'] })).toEqual([0, 1]);
    expect(await versions({ tags: ['nope'] })).toEqual([]);
    expect(await versions({ tags: [] })).toEqual([0, 1, 2]);
    expect(await versions({ aliases: ['pinned'] })).toEqual([1]);
    expect(await versions({ aliases: ['latest'] })).toEqual([2]);
    expect(await versions({ aliases: ['pinned', 'latest'] })).toEqual([1, 2]);
    expect(await versions({ tags: ['alpha', 'beta'], aliases: ['pinned'] })).toEqual([1]);
    // The Python SDK sends every filter key, unset ones as null.
    expect(await versions({ tags: null, aliases: null })).toEqual([0, 1, 2]);
  });

  it('an unlimited objs/query labels thousands of versions in one answer', async () => {
    const big = `${owner.entity}/${uniqueName('big')}`;
    // More object ids than one statement could bind as separate parameters (src/db/limits.ts).
    await sql`insert into trace_objects (project_id, object_id, kind, digest, val, version_index)
      select ${big}, 'o' || i, 'object', 'd' || i, '{}'::jsonb, 0 from generate_series(1, 9000) as i`.execute(app.db);
    ok(await send('PUT', '/objs/o7/versions/d7/tags', { project_id: big, tags: ['seven'] }));
    const response = await post(app, owner, '/objs/query', { project_id: big, metadata_only: true, include_tags_and_aliases: true });
    expect(response.statusCode, response.body.slice(0, 300)).toBe(200);
    const objs = response.json().objs as Record<string, unknown>[];
    expect(objs).toHaveLength(9000);
    expect(objs.filter((o) => (o.tags as string[]).length > 0).map((o) => [o.object_id, o.tags, o.aliases])).toEqual([['o7', ['seven'], ['latest']]]);
  });

  it('obj/read by latest carries the latest version\'s tags and "latest"', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    ok(await addTags(id, digests[1], ['deployed']));
    expect(await read(id, 'latest')).toMatchObject({ version_index: 1, tags: ['deployed'], aliases: ['latest'] });
  });

  it('deleting a version drops its tags and the aliases naming it; others keep theirs', async () => {
    const { id, digests } = await publish({ v: 0 }, { v: 1 });
    ok(await addTags(id, digests[0], ['doomed']));
    ok(await addTags(id, digests[1], ['survivor']));
    ok(await setAliases(id, digests[0], ['doomed-alias']));
    ok(await setAliases(id, digests[1], ['survivor-alias']));
    expect((await post(app, owner, '/obj/delete', { project_id: project, object_id: id, digests: [digests[0]] })).statusCode).toBe(200);
    expect((await post(app, owner, '/obj/read', { project_id: project, object_id: id, digest: 'doomed-alias' })).statusCode).toBe(404);
    expect(await query({ object_ids: [id] }, { include_tags_and_aliases: true }).then((objs) => objs.map((o) => [o.tags, o.aliases]))).toEqual([
      [['survivor'], ['latest', 'survivor-alias']],
    ]);
    // Publishing the deleted value again brings the version back (with its old index), without its old labels.
    await post(app, owner, '/obj/create', { obj: { project_id: project, object_id: id, val: { v: 0 } } });
    expect(await read(id, digests[0])).toMatchObject({ version_index: 0, tags: [], aliases: [] });
  });
});

describe('tenancy', () => {
  it("another tenant can neither read nor change a project's tags and aliases (403, nothing written)", async () => {
    const { id, digests } = await publish({ secret: 1 });
    ok(await addTags(id, digests[0], ['secret-tag']));
    ok(await setAliases(id, digests[0], ['secret-alias']));
    await send('GET', `/tags?project_id=${encodeURIComponent(`${other.entity}/own`)}`, undefined, other); // the key's first use is recorded now
    const refused = { status: 403 as const, body: { reason: `This API key cannot reach project ${project}.` }, secrets: ['secret-tag', 'secret-alias'] };
    const request = (method: 'PUT' | 'POST' | 'GET', url: string, body?: unknown) => ({
      method,
      url: `/traces${url}`,
      headers: { authorization: basicAuth(other.key), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      payload: body === undefined ? undefined : JSON.stringify(body),
    });
    await expectOtherTenantRefused(app, request('PUT', `/objs/${id}/versions/${digests[0]}/tags`, { project_id: project, tags: ['x'] }), refused);
    await expectOtherTenantRefused(app, request('POST', `/objs/${id}/versions/${digests[0]}/tags/remove`, { project_id: project, tags: ['secret-tag'] }), refused);
    await expectOtherTenantRefused(app, request('PUT', `/objs/${id}/aliases`, { project_id: project, digest: digests[0], aliases: ['x'] }), refused);
    await expectOtherTenantRefused(app, request('POST', `/objs/${id}/aliases/remove`, { project_id: project, aliases: ['secret-alias'] }), refused);
    await expectOtherTenantRefused(app, request('GET', `/tags?project_id=${encodeURIComponent(project)}`), refused);
    await expectOtherTenantRefused(app, request('GET', `/aliases?project_id=${encodeURIComponent(project)}`), refused);
    await expectOtherTenantRefused(app, request('POST', '/obj/read', { project_id: project, object_id: id, digest: 'secret-alias', include_tags_and_aliases: true }), refused);
    await expectOtherTenantRefused(app, request('POST', '/refs/read_batch', { refs: [`weave:///${project}/object/${id}:secret-alias`] }), refused);
  });

  it("an alias of the same name in another project resolves only there", async () => {
    const { id, digests } = await publish({ here: true });
    ok(await setAliases(id, digests[0], ['production']));
    const elsewhere = `${owner.entity}/${uniqueName('elsewhere')}`;
    await post(app, owner, '/obj/create', { obj: { project_id: elsewhere, object_id: id, val: { here: false } } });
    const response = await post(app, owner, '/obj/read', { project_id: elsewhere, object_id: id, digest: 'production' });
    expect(response.statusCode).toBe(404);
    expect((await send('GET', `/aliases?project_id=${encodeURIComponent(elsewhere)}`)).json()).toEqual({ aliases: [] });
  });
});
