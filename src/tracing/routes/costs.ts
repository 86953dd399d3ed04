import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../../auth/plugin.js';
import { depsOf, projectFor } from '../http/access.js';
import { Empty, tags } from '../schemas/common.js';
import { CostCreateBody, CostCreateResponse, CostPurgeBody, CostQueryBody, CostQueryResponse } from '../schemas/costs.js';
import * as costs from '../services/costs.js';

export const costRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/cost/create',
    {
      schema: {
        tags,
        summary: 'Set project prices for LLMs',
        description: 'Per-token prices that include_costs prefers over the default table from their effective_date on.',
        body: CostCreateBody,
        response: { 200: CostCreateResponse },
      },
    },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      return { ids: await costs.createCosts(deps, { projectId, userId: principalOf(request).userId, costs: request.body.costs }) };
    },
  );

  app.post(
    '/cost/query',
    { schema: { tags, summary: 'Query the project\'s prices', description: 'Project prices only; the default table is not listed.', body: CostQueryBody, response: { 200: CostQueryResponse } } },
    async (request) => {
      const { body } = request;
      const projectId = projectFor(request, body.project_id);
      return { results: await costs.queryCosts(deps, { projectId, fields: body.fields, query: body.query, sortBy: body.sort_by, limit: body.limit, offset: body.offset }) };
    },
  );

  app.post(
    '/cost/purge',
    { schema: { tags, summary: 'Delete project prices by id', description: 'The query may only name ids; anything else is a 400.', body: CostPurgeBody, response: { 200: Empty } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await costs.purgeCosts(deps, { projectId, query: request.body.query });
      return {};
    },
  );
};
