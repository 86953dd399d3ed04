import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { depsOf, projectFor } from '../http/access.js';
import { sendJsonLines } from '../http/jsonl.js';
import { tags } from '../schemas/common.js';
import { ThreadsQueryBody } from '../schemas/threads.js';
import { streamThreads } from '../services/threads.js';

export const threadRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/threads/stream_query',
    {
      schema: {
        tags,
        summary: 'Query threads (JSON Lines)',
        description: 'One ThreadSchema per line: threads aggregated from their turn calls (calls whose id is their turn_id).',
        body: ThreadsQueryBody,
        produces: ['application/jsonl'],
        response: { 200: z.string().describe('JSON Lines of ThreadSchema') },
      },
    },
    async (request, reply) => {
      projectFor(request, request.body.project_id);
      return sendJsonLines(reply, streamThreads(deps, request.body));
    },
  );
};
