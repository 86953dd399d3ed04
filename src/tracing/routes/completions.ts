import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { principalOf } from '../../auth/plugin.js';
import { depsOf, projectFor } from '../http/access.js';
import { gatewayFor } from '../http/gateway-client.js';
import { sendJsonLines } from '../http/jsonl.js';
import { tags } from '../schemas/common.js';
import { CompletionsCreateBody, CompletionsCreateResponse } from '../schemas/completions.js';
import { createCompletion, streamCompletion } from '../services/completions.js';

export const completionRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/completions/create',
    {
      schema: {
        tags,
        summary: 'Chat completion through the inference gateway',
        description:
          'Any model the key can reach on /v1/chat/completions, usage billed to project_id. With track_llm_call (default) a weave.completions_create call is ' +
          'recorded and its id returned. A failure of the model or engine is answered as {"response": {"error": "<message>"}}.',
        body: CompletionsCreateBody,
        response: { 200: CompletionsCreateResponse },
      },
    },
    async (request) => {
      projectFor(request, request.body.project_id);
      return createCompletion(deps, gatewayFor(app, request), { userId: principalOf(request).userId, body: request.body });
    },
  );

  app.post(
    '/completions/create_stream',
    {
      schema: {
        tags,
        summary: 'Streamed chat completion through the inference gateway (JSON Lines)',
        description: 'First line {"_meta": {"weave_call_id": ...}} when tracked, then one chat.completion.chunk per line, or one {"error": ...} line.',
        body: CompletionsCreateBody,
        produces: ['application/jsonl'],
        response: { 200: z.string().describe('JSON Lines') },
      },
    },
    async (request, reply) => {
      projectFor(request, request.body.project_id);
      return sendJsonLines(reply, streamCompletion(deps, gatewayFor(app, request), { userId: principalOf(request).userId, body: request.body }));
    },
  );
};
