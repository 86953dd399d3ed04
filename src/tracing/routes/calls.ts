import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { principalOf } from '../../auth/plugin.js';
import { depsOf, projectFor } from '../http/access.js';
import { sendJsonLines, sendJsonText } from '../http/jsonl.js';
import {
  CallEndBody,
  CallReadBody,
  CallReadResponse,
  CallsDeleteBody,
  CallsDeleteResponse,
  CallsQueryBody,
  CallsQueryResponse,
  CallsQueryStatsBody,
  CallsQueryStatsResponse,
  CallStartBody,
  CallStartResponse,
  CallUpdateBody,
  UpsertBatchBody,
  UpsertBatchResponse,
} from '../schemas/calls.js';
import { Empty, tags, TRACING_LIMITS } from '../schemas/common.js';
import * as calls from '../services/calls.js';

export const callRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/call/start',
    { config: { exactNumbers: true }, schema: { tags, summary: 'Start a call', body: CallStartBody, response: { 200: CallStartResponse } } },
    async (request) => {
      projectFor(request, request.body.start.project_id);
      const [result] = await calls.upsertBatch(deps, { userId: principalOf(request).userId, items: [{ mode: 'start', start: request.body.start }] });
      return { id: result.id, trace_id: result.trace_id! };
    },
  );

  app.post('/call/end', { config: { exactNumbers: true }, schema: { tags, summary: 'End a call', body: CallEndBody, response: { 200: Empty } } }, async (request) => {
    projectFor(request, request.body.end.project_id);
    await calls.upsertBatch(deps, { userId: principalOf(request).userId, items: [{ mode: 'end', end: request.body.end }] });
    return {};
  });

  app.post(
    '/call/upsert_batch',
    {
      config: { exactNumbers: true },
      schema: {
        tags,
        summary: 'Start and end calls in one batch',
        description: 'All items are written in one transaction of multi-row statements: all or nothing. Starts and ends merge in either order.',
        body: UpsertBatchBody,
        response: { 200: UpsertBatchResponse },
      },
    },
    async (request) => {
      const items = request.body.batch.map((item) =>
        item.mode === 'start' ? { mode: 'start' as const, start: item.req.start } : { mode: 'end' as const, end: item.req.end },
      );
      const projects = new Set(items.map((item) => (item.mode === 'start' ? item.start.project_id : item.end.project_id)));
      for (const projectId of projects) projectFor(request, projectId);
      const results = await calls.upsertBatch(deps, { userId: principalOf(request).userId, items });
      return { res: results.map((r) => (r.trace_id ? { id: r.id, trace_id: r.trace_id } : ({} as Record<string, never>))) };
    },
  );

  app.post('/call/read', { schema: { tags, summary: 'Read a call', body: CallReadBody, response: { 200: CallReadResponse } } }, async (request) => {
    const { body } = request;
    const projectId = projectFor(request, body.project_id);
    const call = await calls.readCall(deps, {
      projectId,
      id: body.id,
      storageSize: body.include_storage_size ?? false,
      totalStorageSize: body.include_total_storage_size ?? false,
      costs: body.include_costs ?? false,
    });
    return { call };
  });

  app.post(
    '/call/update',
    { schema: { tags, summary: 'Set or clear a call\'s display name', body: CallUpdateBody, response: { 200: Empty } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await calls.updateCall(deps, { projectId, id: request.body.call_id, displayName: request.body.display_name });
      return {};
    },
  );

  app.post(
    '/calls/delete',
    { schema: { tags, summary: 'Delete calls and their descendants', body: CallsDeleteBody, response: { 200: CallsDeleteResponse } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      return { num_deleted: await calls.deleteCalls(deps, { projectId, ids: request.body.call_ids }) };
    },
  );

  app.post(
    '/calls/query_stats',
    { config: { exactNumbers: true }, schema: { tags, summary: 'Count calls', body: CallsQueryStatsBody, response: { 200: CallsQueryStatsResponse } } },
    async (request) => {
      const { body } = request;
      const projectId = projectFor(request, body.project_id);
      return calls.queryStats(deps, { projectId, filter: body.filter, query: body.query, expandColumns: body.expand_columns, limit: body.limit, totalStorageSize: body.include_total_storage_size ?? false });
    },
  );

  app.post(
    '/calls/stream_query',
    {
      config: { exactNumbers: true },
      schema: {
        tags,
        summary: 'Query calls (JSON Lines)',
        description: 'One CallSchema per line, streamed as rows are read from the database. An empty result is an empty body.',
        body: CallsQueryBody,
        produces: ['application/jsonl'],
        response: { 200: z.string().describe('JSON Lines of CallSchema') },
      },
    },
    async (request, reply) => {
      const { project_id: projectId, ...query } = request.body;
      projectFor(request, projectId);
      return sendJsonLines(reply, calls.callTexts(deps, projectId, query), { encoded: true });
    },
  );

  app.post(
    '/calls/query',
    {
      config: { exactNumbers: true },
      schema: {
        tags,
        summary: 'Query calls',
        description: `At most ${TRACING_LIMITS.answerBytes / (1024 * 1024)} MiB of JSON in one answer (400 past it, unless it holds a single call); /calls/stream_query streams any number of calls.`,
        body: CallsQueryBody,
        response: { 200: CallsQueryResponse },
      },
    },
    async (request, reply) => {
      const { project_id: projectId, ...query } = request.body;
      projectFor(request, projectId);
      return sendJsonText(reply, await calls.queryCallsJson(deps, projectId, query));
    },
  );
};
