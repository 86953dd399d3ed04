import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import type { App } from '../../src/app.js';
import * as callSchemas from '../../src/tracing/schemas/calls.js';
import * as fileSchemas from '../../src/tracing/schemas/files.js';
import * as objectSchemas from '../../src/tracing/schemas/objects.js';
import * as refSchemas from '../../src/tracing/schemas/refs.js';
import * as tableSchemas from '../../src/tracing/schemas/tables.js';
import { createTestApp, uniqueName, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused } from '../helpers/tenants.js';
import { basicAuth, callItems, post } from './helpers.js';

let app: App;
let owner: TestUser;
let other: TestUser;
let project: string;
let objDigest: string;
let table: { digest: string; row_digests: string[] };
const secret = 'owner-secret-value';

beforeAll(async () => {
  app = await createTestApp();
  ({ owner, other } = await createTenants(app));
  project = `${owner.entity}/${uniqueName('private')}`;
  await post(app, owner, '/call/upsert_batch', { batch: callItems(project, { id: 'owned-call', inputs: { secret } }) });
  objDigest = (await post(app, owner, '/obj/create', { obj: { project_id: project, object_id: 'owned', val: { secret } } })).json().digest;
  table = (await post(app, owner, '/table/create', { table: { project_id: project, rows: [{ secret }] } })).json();
  // The first use of a key records its last_used_at; do it here so the fingerprints compare requests only.
  await post(app, other, '/objs/query', { project_id: `${other.entity}/warmup` });
});
afterAll(async () => {
  await app.close();
});

interface RouteCase {
  url: string;
  schema: z.ZodType;
  valid: () => Record<string, unknown>;
}

const start = () => ({ project_id: project, id: 'x', op_name: 'op', started_at: '2025-01-01T00:00:00Z', attributes: {}, inputs: {} });
const end = () => ({ project_id: project, id: 'x', ended_at: '2025-01-01T00:00:01Z', summary: {}, output: null });

const routes: RouteCase[] = [
  { url: '/call/start', schema: callSchemas.CallStartBody, valid: () => ({ start: start() }) },
  { url: '/call/end', schema: callSchemas.CallEndBody, valid: () => ({ end: end() }) },
  { url: '/call/upsert_batch', schema: callSchemas.UpsertBatchBody, valid: () => ({ batch: [{ mode: 'start', req: { start: start() } }] }) },
  { url: '/call/read', schema: callSchemas.CallReadBody, valid: () => ({ project_id: project, id: 'owned-call' }) },
  { url: '/call/update', schema: callSchemas.CallUpdateBody, valid: () => ({ project_id: project, call_id: 'owned-call', display_name: 'hijacked' }) },
  { url: '/calls/delete', schema: callSchemas.CallsDeleteBody, valid: () => ({ project_id: project, call_ids: ['owned-call'] }) },
  { url: '/calls/query_stats', schema: callSchemas.CallsQueryStatsBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: '/calls/stream_query', schema: callSchemas.CallsQueryBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: '/calls/query', schema: callSchemas.CallsQueryBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: '/obj/create', schema: objectSchemas.ObjCreateBody, valid: () => ({ obj: { project_id: project, object_id: 'owned', val: { other: true } } }) },
  { url: '/obj/read', schema: objectSchemas.ObjReadBody, valid: () => ({ project_id: project, object_id: 'owned', digest: objDigest }) },
  { url: '/objs/query', schema: objectSchemas.ObjQueryBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: '/obj/delete', schema: objectSchemas.ObjDeleteBody, valid: () => ({ project_id: project, object_id: 'owned', digests: [objDigest] }) },
  { url: '/table/create', schema: tableSchemas.TableCreateBody, valid: () => ({ table: { project_id: project, rows: [{ a: 1 }] } }) },
  { url: '/table/update', schema: tableSchemas.TableUpdateBody, valid: () => ({ project_id: project, base_digest: table.digest, updates: [{ pop: { index: 0 } }] }) },
  { url: '/table/query', schema: tableSchemas.TableQueryBody, valid: () => ({ project_id: project, digest: table.digest, limit: 10 }) },
  { url: '/table/query_stream', schema: tableSchemas.TableQueryBody, valid: () => ({ project_id: project, digest: table.digest, limit: 10 }) },
  { url: '/table/query_stats', schema: tableSchemas.TableQueryStatsBody, valid: () => ({ project_id: project, digest: table.digest }) },
  { url: '/table/query_stats_batch', schema: tableSchemas.TableQueryStatsBatchBody, valid: () => ({ project_id: project, digests: [table.digest] }) },
  { url: '/table/create_from_digests', schema: tableSchemas.TableCreateFromDigestsBody, valid: () => ({ project_id: project, row_digests: table.row_digests }) },
  { url: '/file/content', schema: fileSchemas.FileContentBody, valid: () => ({ project_id: project, digest: 'x' }) },
  { url: '/files/content', schema: fileSchemas.FileContentBody, valid: () => ({ project_id: project, digest: 'x' }) },
  { url: '/refs/read_batch', schema: refSchemas.RefsReadBatchBody, valid: () => ({ refs: [`weave:///${project}/object/owned:${objDigest}`] }) },
];

describe('another tenant naming the owner\'s project', () => {
  for (const route of routes) {
    it(`is refused with 403 on ${route.url}, reading and writing nothing`, async () => {
      await expectOtherTenantRefused(
        app,
        { method: 'POST', url: `/traces${route.url}`, headers: { authorization: basicAuth(other.key), 'content-type': 'application/json' }, payload: route.valid() },
        { status: 403, body: { reason: `This API key cannot reach project ${project}.` }, secrets: [secret] },
      );
    });
  }

  for (const url of ['/file/create', '/files/create']) {
    it(`is refused with 403 on ${url}, storing nothing`, async () => {
      const boundary = 'tenancy';
      const payload =
        `--${boundary}\r\nContent-Disposition: form-data; name="project_id"\r\n\r\n${project}\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="blob"\r\nContent-Type: application/octet-stream\r\n\r\nintruder\r\n--${boundary}--\r\n`;
      await expectOtherTenantRefused(
        app,
        { method: 'POST', url: `/traces${url}`, headers: { authorization: basicAuth(other.key), 'content-type': `multipart/form-data; boundary=${boundary}` }, payload },
        { status: 403, body: { reason: `This API key cannot reach project ${project}.` } },
      );
    });
  }

  it('is refused when one item of an upsert batch names the owner\'s project', async () => {
    const mine = `${other.entity}/mine`;
    const batch = [...callItems(mine, { id: 'fine' }), ...callItems(project, { id: 'intruder' })];
    await expectOtherTenantRefused(
      app,
      { method: 'POST', url: '/traces/call/upsert_batch', headers: { authorization: basicAuth(other.key), 'content-type': 'application/json' }, payload: { batch } },
      { status: 403, body: { reason: `This API key cannot reach project ${project}.` } },
    );
  });

  it('answers the owner normally on the same routes', async () => {
    const response = await post(app, owner, '/refs/read_batch', { refs: [`weave:///${project}/object/owned:${objDigest}`] });
    expect(response.json()).toEqual({ vals: [{ secret }] });
  });
});

describe('bad input', () => {
  for (const route of routes) {
    it(`is rejected with 4xx on ${route.url}, writing nothing`, async () => {
      await expectBadInputRejected(app, {
        request: { method: 'POST', url: `/traces${route.url}`, headers: owner.headers },
        schema: route.schema,
        valid: route.valid(),
        family: 'tracing',
      });
    });
  }

  it('a request without a key is 401 and one with an unknown field is accepted', async () => {
    const anonymous = await app.inject({ method: 'POST', url: '/traces/objs/query', payload: { project_id: project } });
    expect(anonymous.statusCode).toBe(401);
    const before = await databaseFingerprint(app);
    const extra = await post(app, owner, '/objs/query', { project_id: project, filter: { object_ids: ['owned'], brand_new: 1 }, brand_new_field: true });
    expect(extra.statusCode).toBe(200);
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});
