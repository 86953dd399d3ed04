import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../../auth/plugin.js';
import { InvalidRequestError } from '../../errors.js';
import { depsOf, projectFor } from '../http/access.js';
import { CallStartResponse } from '../schemas/calls.js';
import { Empty, tags } from '../schemas/common.js';
import { CallsCompleteBody, V2CallEndBody, V2CallStartBody, V2Params } from '../schemas/v2.js';
import * as calls from '../services/calls.js';

/** The project of a v2 path; every item's project_id must be it (checked for access first). */
function pathProject(request: FastifyRequest<{ Params: { entity: string; project: string } }>, itemProjects: Iterable<string>): string {
  const projectId = projectFor(request, `${request.params.entity}/${request.params.project}`);
  for (const item of new Set(itemProjects)) {
    if (item !== projectId) {
      projectFor(request, item);
      throw new InvalidRequestError(`project_id ${item} does not match the project of the path (${projectId}).`, { code: 'project_mismatch', param: 'project_id' });
    }
  }
  return projectId;
}

export const v2Routes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/v2/:entity/:project/calls/complete',
    {
      config: { exactNumbers: true },
      schema: {
        tags,
        summary: 'Write finished calls (v2)',
        description: 'Each item is a whole call (start and end in one record), written as /call/upsert_batch would: one transaction.',
        params: V2Params,
        body: CallsCompleteBody,
        response: { 200: Empty },
      },
    },
    async (request) => {
      pathProject(request, request.body.batch.map((call) => call.project_id));
      const items = request.body.batch.flatMap((call) => {
        const { ended_at, exception, output, summary, wb_run_step_end, ...start } = call;
        const end = { project_id: call.project_id, id: call.id, ended_at, exception, output, summary, wb_run_step_end, display_name: call.display_name };
        return [{ mode: 'start' as const, start }, { mode: 'end' as const, end }];
      });
      await calls.upsertBatch(deps, { userId: principalOf(request).userId, items });
      return {};
    },
  );

  app.post(
    '/v2/:entity/:project/call/start',
    { config: { exactNumbers: true }, schema: { tags, summary: 'Start a call (v2)', params: V2Params, body: V2CallStartBody, response: { 200: CallStartResponse } } },
    async (request) => {
      pathProject(request, [request.body.start.project_id]);
      const [result] = await calls.upsertBatch(deps, { userId: principalOf(request).userId, items: [{ mode: 'start', start: request.body.start }] });
      return { id: result.id, trace_id: result.trace_id! };
    },
  );

  app.post(
    '/v2/:entity/:project/call/end',
    { config: { exactNumbers: true }, schema: { tags, summary: 'End a call (v2)', params: V2Params, body: V2CallEndBody, response: { 200: Empty } } },
    async (request) => {
      pathProject(request, [request.body.end.project_id]);
      await calls.upsertBatch(deps, { userId: principalOf(request).userId, items: [{ mode: 'end', end: request.body.end }] });
      return {};
    },
  );
};
