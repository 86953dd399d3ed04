import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import type { App } from '../../src/app.js';
import { OtlpJsonRequest } from '../../src/tracing/otel/json.js';
import * as costSchemas from '../../src/tracing/schemas/costs.js';
import * as feedbackSchemas from '../../src/tracing/schemas/feedback.js';
import * as threadSchemas from '../../src/tracing/schemas/threads.js';
import * as v2Schemas from '../../src/tracing/schemas/v2.js';
import { createTestApp, uniqueName, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { createTenants, expectOtherTenantRefused } from '../helpers/tenants.js';
import { basicAuth, callItems, lines, post } from './helpers.js';

let app: App;
let owner: TestUser;
let other: TestUser;
let project: string;
let feedbackId: string;
let costId: string;
const secret = 'owner-secret-feedback';

beforeAll(async () => {
  app = await createTestApp();
  ({ owner, other } = await createTenants(app));
  project = `${owner.entity}/${uniqueName('private')}`;
  await post(app, owner, '/call/upsert_batch', { batch: callItems(project, { id: 'owned-call', thread_id: 't', turn_id: 'owned-call' }) });
  feedbackId = (await post(app, owner, '/feedback/create', { project_id: project, weave_ref: `weave:///${project}/call/owned-call`, feedback_type: 'custom', payload: { secret } })).json().id;
  costId = (await post(app, owner, '/cost/create', { project_id: project, costs: { 'secret-model': { prompt_token_cost: 1, completion_token_cost: 1 } } })).json().ids[0][0];
  await post(app, other, '/objs/query', { project_id: `${other.entity}/warmup` });
});
afterAll(async () => {
  await app.close();
});

interface RouteCase {
  url: string;
  schema: z.ZodType;
  valid: () => Record<string, unknown>;
  headers?: () => Record<string, string>;
}

const fb = () => ({ project_id: project, weave_ref: `weave:///${project}/call/owned-call`, feedback_type: 'custom', payload: { x: 1 } });
const byId = (id: string) => ({ $expr: { $eq: [{ $getField: 'id' }, { $literal: id }] } });
const started = () => ({ project_id: project, id: 'v2', op_name: 'op', started_at: '2025-01-01T00:00:00Z', attributes: {}, inputs: {} });
const otlp = () => ({
  resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans: [{ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', name: 'x', startTimeUnixNano: '1735689600000000000', endTimeUnixNano: '1735689601000000000' }] }] }],
});

const routes: RouteCase[] = [
  { url: '/feedback/create', schema: feedbackSchemas.FeedbackCreateBody, valid: fb },
  { url: '/feedback/batch/create', schema: feedbackSchemas.FeedbackBatchCreateBody, valid: () => ({ batch: [fb()] }) },
  { url: '/feedback/query', schema: feedbackSchemas.FeedbackQueryBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: '/feedback/purge', schema: feedbackSchemas.FeedbackPurgeBody, valid: () => ({ project_id: project, query: byId(feedbackId) }) },
  { url: '/feedback/replace', schema: feedbackSchemas.FeedbackReplaceBody, valid: () => ({ ...fb(), feedback_id: feedbackId }) },
  { url: '/cost/create', schema: costSchemas.CostCreateBody, valid: () => ({ project_id: project, costs: { m: { prompt_token_cost: 1, completion_token_cost: 2 } } }) },
  { url: '/cost/query', schema: costSchemas.CostQueryBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: '/cost/purge', schema: costSchemas.CostPurgeBody, valid: () => ({ project_id: project, query: byId(costId) }) },
  { url: '/threads/stream_query', schema: threadSchemas.ThreadsQueryBody, valid: () => ({ project_id: project, limit: 10 }) },
  { url: `/v2/${'OWNER'}/calls/complete`, schema: v2Schemas.CallsCompleteBody, valid: () => ({ batch: [{ ...started(), trace_id: 't', ended_at: '2025-01-01T00:00:01Z', summary: {} }] }) },
  { url: `/v2/${'OWNER'}/call/start`, schema: v2Schemas.V2CallStartBody, valid: () => ({ start: started() }) },
  { url: `/v2/${'OWNER'}/call/end`, schema: v2Schemas.V2CallEndBody, valid: () => ({ end: { project_id: project, id: 'owned-call', ended_at: '2025-01-01T00:00:01Z', summary: {} } }) },
  { url: '/otel/v1/traces', schema: OtlpJsonRequest, valid: otlp, headers: () => ({ project_id: project }) },
  { url: '/otel/v1/trace', schema: OtlpJsonRequest, valid: otlp, headers: () => ({ project_id: project }) },
];
const urlOf = (route: RouteCase) => `/traces${route.url.replace('OWNER', project)}`;

describe('another tenant naming the owner\'s project', () => {
  for (const route of routes) {
    it(`is refused with 403 on ${route.url}, reading and writing nothing`, async () => {
      await expectOtherTenantRefused(
        app,
        { method: 'POST', url: urlOf(route), headers: { authorization: basicAuth(other.key), 'content-type': 'application/json', ...route.headers?.() }, payload: route.valid() },
        { status: 403, body: { reason: `This API key cannot reach project ${project}.` }, secrets: [secret, 'secret-model'] },
      );
    });
  }

  it('is refused on OTLP with the project in resource attributes and a wandb-api-key header', async () => {
    const body = otlp();
    (body.resourceSpans[0].resource.attributes as unknown[]).push({ key: 'wandb.entity', value: { stringValue: owner.entity } }, { key: 'wandb.project', value: { stringValue: project.split('/')[1] } });
    await expectOtherTenantRefused(
      app,
      { method: 'POST', url: '/traces/otel/v1/traces', headers: { 'wandb-api-key': other.key, 'content-type': 'application/json' }, payload: body },
      { status: 403, body: { reason: `This API key cannot reach project ${project}.` } },
    );
  });

  it('is refused when a v2 item names the owner\'s project under the caller\'s own path', async () => {
    const mine = `${other.entity}/mine`;
    await expectOtherTenantRefused(
      app,
      { method: 'POST', url: `/traces/v2/${mine}/call/start`, headers: { authorization: basicAuth(other.key), 'content-type': 'application/json' }, payload: { start: started() } },
      { status: 403, body: { reason: `This API key cannot reach project ${project}.` } },
    );
  });

  it('still shows the owner everything', async () => {
    expect((await post(app, owner, '/feedback/query', { project_id: project, fields: ['id'] })).json().result).toEqual([{ id: feedbackId }]);
    expect((await post(app, owner, '/cost/query', { project_id: project, fields: ['id'] })).json().results).toEqual([{ id: costId }]);
    expect(lines((await post(app, owner, '/threads/stream_query', { project_id: project })).body)).toHaveLength(1);
  });
});

describe('bad input', () => {
  for (const route of routes) {
    it(`is rejected with 4xx on ${route.url}, writing nothing`, async () => {
      await expectBadInputRejected(app, {
        request: { method: 'POST', url: urlOf(route), headers: { ...owner.headers, ...route.headers?.() } },
        schema: route.schema,
        valid: route.valid(),
        family: 'tracing',
      });
    });
  }
});

describe('the v2 routes of newer clients', () => {
  it('write finished calls, starts and ends', async () => {
    const mine = `${owner.entity}/${uniqueName('v2')}`;
    const complete = await post(app, owner, `/v2/${mine}/calls/complete`, {
      batch: [{ project_id: mine, id: 'done', trace_id: 'tr', op_name: 'op', display_name: 'Done', started_at: '2025-01-01T00:00:00Z', ended_at: '2025-01-01T00:00:02Z', attributes: {}, inputs: { a: 1 }, output: 42, summary: {} }],
    });
    expect(complete.statusCode, complete.body).toBe(200);
    expect(complete.json()).toEqual({});
    const start = await post(app, owner, `/v2/${mine}/call/start`, { start: { project_id: mine, op_name: 'op', started_at: '2025-01-01T00:00:05Z', attributes: {}, inputs: {} } });
    expect(start.json()).toEqual({ id: expect.any(String), trace_id: expect.any(String) });
    const end = await post(app, owner, `/v2/${mine}/call/end`, { end: { project_id: mine, id: start.json().id, ended_at: '2025-01-01T00:00:06Z', summary: {}, output: 'ok' } });
    expect(end.json()).toEqual({});
    const stored = (await post(app, owner, '/calls/query', { project_id: mine })).json().calls;
    expect(stored.map((c: Record<string, unknown>) => [c.id, c.display_name, c.output, c.ended_at])).toEqual([
      ['done', 'Done', 42, '2025-01-01T00:00:02.000000Z'],
      [start.json().id, null, 'ok', '2025-01-01T00:00:06.000000Z'],
    ]);
  });

  it('refuses an item whose project differs from the path', async () => {
    const mine = `${owner.entity}/${uniqueName('v2')}`;
    const other2 = `${owner.entity}/${uniqueName('v2')}`;
    const response = await post(app, owner, `/v2/${mine}/call/start`, { start: { project_id: other2, op_name: 'op', started_at: '2025-01-01T00:00:05Z', attributes: {}, inputs: {} } });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ reason: `project_id ${other2} does not match the project of the path (${mine}).` });
  });
});
