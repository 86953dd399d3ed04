import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../auth/plugin.js';
import type { ChatGateway } from './gateway.js';
import { Cancel, type CancelSignal } from './proxy/cancel.js';
import { ChatCompletion, ChatCompletionRequest, ErrorEnvelope, ModelList, ValidationErrorBody } from './schemas.js';
import { UsageQuery, UsageReport } from './usage/schemas.js';
import type { UsageService } from './usage/service.js';

export interface InferenceRoutesOptions {
  gateway: ChatGateway;
  usage: UsageService;
  listModels(request: FastifyRequest): Promise<ModelList>;
}

const tags = ['inference'];

/**
 * A signal that fires when the client goes away before the response has been sent in full; already
 * fired when it left before the handler started (its 'close' has been and gone), so that no engine
 * is asked for a completion nobody will read.
 */
function clientGone(request: FastifyRequest, reply: FastifyReply): CancelSignal {
  const cancel = new Cancel();
  const res = reply.raw;
  if (res.destroyed || request.raw.socket?.destroyed) {
    cancel.abort();
    return cancel;
  }
  res.once('close', () => {
    if (!res.writableFinished) cancel.abort();
  });
  return cancel;
}

export const inferenceRoutes: FastifyPluginAsyncZod<InferenceRoutesOptions> = async (app, { gateway, usage, listModels }) => {
  const chat = {
    schema: {
      tags,
      summary: 'Create a chat completion',
      description:
        'OpenAI-compatible. With `stream: true` the answer is server-sent events (`data: <chunk>` ... `data: [DONE]`). ' +
        '`Compat-Project` (or `OpenAI-Project`) names the project usage is recorded under.',
      body: ChatCompletionRequest,
      response: {
        200: ChatCompletion,
        400: ErrorEnvelope.describe('The engine refused the request (its message and param), or a malformed Compat-Project'),
        401: ErrorEnvelope.describe('Missing or invalid API key'),
        403: ErrorEnvelope.describe('The key cannot reach the Compat-Project project'),
        404: ErrorEnvelope.describe('model_not_found: unknown, unreachable, or no backend configured'),
        422: ValidationErrorBody.describe('The body breaks a field rule'),
        429: ErrorEnvelope.describe('The engine is rate limiting; Retry-After says for how long'),
        502: ErrorEnvelope.describe('upstream_error: the engine failed'),
        503: ErrorEnvelope.describe('upstream_unreachable or upstream_unavailable'),
        504: ErrorEnvelope.describe('upstream_timeout'),
      },
    },
  };
  const handler = async (request: FastifyRequest<{ Body: ChatCompletionRequest }>, reply: FastifyReply) => {
    const headers = request.headers;
    const result = await gateway.complete({
      principal: principalOf(request),
      body: request.body,
      requestId: request.id,
      projectHeader: (headers['compat-project'] ?? headers['openai-project']) as string | undefined,
      signal: clientGone(request, reply),
    });
    reply.header('x-request-id', result.requestId);
    if (result.kind === 'stream') {
      // no-transform and X-Accel-Buffering keep proxies from buffering or compressing the stream.
      reply.type('text/event-stream').header('cache-control', 'no-cache, no-transform').header('x-accel-buffering', 'no');
    } else {
      reply.type('application/json; charset=utf-8');
    }
    return reply.send(result.payload);
  };
  app.post('/v1/chat/completions', chat, handler);
  app.post('/v1/chat/completions/', chat, handler);

  app.get(
    '/v1/models',
    { schema: { tags, summary: 'List the models this key can use', response: { 200: ModelList, 401: ErrorEnvelope } } },
    async (request) => listModels(request),
  );

  app.get(
    '/v1/usage',
    {
      schema: {
        tags,
        summary: 'Sum recorded chat completion usage of a project',
        querystring: UsageQuery,
        response: { 200: UsageReport, 401: ErrorEnvelope, 403: ErrorEnvelope, 422: ValidationErrorBody },
      },
    },
    async (request) => usage.report(principalOf(request), request.query),
  );
};
