import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../../auth/plugin.js';
import { depsOf } from '../http/access.js';
import { sendJsonText } from '../http/jsonl.js';
import { tags, TRACING_LIMITS } from '../schemas/common.js';
import { RefsReadBatchBody, RefsReadBatchResponse } from '../schemas/refs.js';
import { readRefsBatch } from '../services/refs.js';

export const refRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);
  app.post(
    '/refs/read_batch',
    {
      schema: {
        tags,
        summary: 'Read the values of object and op refs',
        description:
          'At most 1000 refs, all into one project the key reaches. Deleted objects read as null. ' +
          `At most ${TRACING_LIMITS.answerBytes / (1024 * 1024)} MiB of JSON in one answer (400 past it, naming how many values fit, unless it holds a single value).`,
        body: RefsReadBatchBody,
        response: { 200: RefsReadBatchResponse },
      },
    },
    async (request, reply) => sendJsonText(reply, await readRefsBatch(deps, { refs: request.body.refs, entities: principalOf(request).entities })),
  );
};
