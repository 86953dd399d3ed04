import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { depsOf, projectFor } from '../http/access.js';
import { losslessBody } from '../http/body.js';
import { sendJsonLines, sendLosslessJson } from '../http/jsonl.js';
import type { LosslessJson } from '../json.js';
import { tags } from '../schemas/common.js';
import {
  TableCreateBody,
  TableCreateFromDigestsBody,
  TableCreateFromDigestsResponse,
  TableCreateResponse,
  TableQueryBody,
  TableQueryResponse,
  TableQueryStatsBatchBody,
  TableQueryStatsBatchResponse,
  TableQueryStatsBody,
  TableQueryStatsResponse,
  TableUpdateBody,
  TableUpdateResponse,
} from '../schemas/tables.js';
import * as tables from '../services/tables.js';

export const tableRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/table/create',
    { config: { losslessBody: true }, schema: { tags, summary: 'Create a table', body: TableCreateBody, response: { 200: TableCreateResponse } } },
    async (request) => {
      const { table } = request.body;
      const projectId = projectFor(request, table.project_id);
      const lossless = losslessBody(request) as { table: { rows: LosslessJson[] } };
      return tables.createTable(deps, { projectId, rows: lossless.table.rows, expectedDigest: table.expected_digest });
    },
  );

  app.post(
    '/table/update',
    { config: { losslessBody: true }, schema: { tags, summary: 'Append, pop and insert rows', body: TableUpdateBody, response: { 200: TableUpdateResponse } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      const lossless = losslessBody(request) as { updates: tables.TableUpdate[] };
      // The schema has checked the shapes; the lossless copy carries the same updates with exact numbers.
      const updates = request.body.updates.map((update, i) => {
        const exact = lossless.updates[i] as Record<string, { row?: LosslessJson }>;
        if ('append' in update) return { append: { row: exact.append.row ?? null } };
        if ('insert' in update) return { insert: { index: update.insert.index, row: exact.insert.row ?? null } };
        return { pop: { index: update.pop.index } };
      });
      return tables.updateTable(deps, { projectId, baseDigest: request.body.base_digest, updates });
    },
  );

  const query = (body: z.infer<typeof TableQueryBody>) => ({
    projectId: body.project_id,
    digest: body.digest,
    rowDigests: body.filter?.row_digests,
    sortBy: body.sort_by,
    limit: body.limit,
    offset: body.offset,
  });

  app.post('/table/query', { schema: { tags, summary: 'Query table rows', body: TableQueryBody, response: { 200: TableQueryResponse } } }, async (request, reply) => {
    projectFor(request, request.body.project_id);
    return sendLosslessJson(reply, { rows: await tables.queryTable(deps, query(request.body)) });
  });

  app.post(
    '/table/query_stream',
    {
      schema: {
        tags,
        summary: 'Query table rows (JSON Lines)',
        body: TableQueryBody,
        produces: ['application/jsonl'],
        response: { 200: z.string().describe('JSON Lines of {digest, val, original_index}') },
      },
    },
    async (request, reply) => {
      projectFor(request, request.body.project_id);
      return sendJsonLines(reply, tables.streamTable(deps, query(request.body)), { lossless: true });
    },
  );

  app.post(
    '/table/query_stats',
    { schema: { tags, summary: 'Count table rows', body: TableQueryStatsBody, response: { 200: TableQueryStatsResponse } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      return tables.tableStats(deps, { projectId, digest: request.body.digest });
    },
  );

  app.post(
    '/table/query_stats_batch',
    { schema: { tags, summary: 'Count rows of several tables', body: TableQueryStatsBatchBody, response: { 200: TableQueryStatsBatchResponse } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      return { tables: await tables.tableStatsBatch(deps, { projectId, digests: request.body.digests ?? [], storageSize: request.body.include_storage_size ?? false }) };
    },
  );

  app.post(
    '/table/create_from_digests',
    {
      schema: { tags, summary: 'Create a table from stored rows', body: TableCreateFromDigestsBody, response: { 200: TableCreateFromDigestsResponse } },
    },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      return tables.createTableFromDigests(deps, { projectId, rowDigests: request.body.row_digests, expectedDigest: request.body.expected_digest });
    },
  );
};
