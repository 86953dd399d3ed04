import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchemaCompiler } from 'fastify';
import { z } from 'zod';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../auth/plugin.js';
import { decodeJsonText } from '../http/body-encoding.js';
import { coerceLaxFields, holdIntegers, parseExactJson, restoreHeld, type HeldInteger, type LaxKind } from './exact-json.js';
import { fastChatBody, fastCompletionBody, fastValidatorCompiler, validatedFast } from './fast-validation.js';
import type { ChatGateway, Endpoint, EngineCall } from './gateway.js';
import { Cancel, type CancelSignal } from './proxy/cancel.js';
import {
  ChatCompletion,
  ChatCompletionRequest,
  Completion,
  COMPLETION_LAX_FIELDS,
  CompletionRequest,
  DetokenizeRequest,
  DetokenizeResponse,
  ErrorEnvelope,
  LAX_FIELDS,
  Model,
  ModelList,
  ModelParams,
  TokenizeRequest,
  TokenizeResponse,
  ValidationErrorBody,
  type EngineRequestBody,
} from './schemas.js';
import { UsageQuery, UsageReport } from './usage/schemas.js';
import type { UsageService } from './usage/service.js';

export interface InferenceRoutesOptions {
  gateway: ChatGateway;
  usage: UsageService;
  listModels(request: FastifyRequest): Promise<ModelList>;
  getModel(request: FastifyRequest, id: string): Promise<Model>;
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

declare module 'fastify' {
  interface FastifyRequest {
    /** Integers a double would change, held out of validation and put back after it. */
    heldIntegers?: HeldInteger[];
    /**
     * The body's JSON text while the parsed body means exactly what it says: plain JSON (nothing
     * dropped), no integer held, no field coerced.
     */
    bodyText?: string;
  }
}

/**
 * Bodies read as vLLM reads them: integer literals exactly as written (exact-json.ts), and the
 * scalars pydantic's lax mode coerces (`"max_tokens": "16"`) coerced before the schema sees them.
 */
function exactBodies(app: FastifyInstance): void {
  if (app.hasContentTypeParser('application/json')) app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      const text = decodeJsonText(request, body as Buffer, 'json_invalid');
      const { value, exact, plain } = parseExactJson(text);
      // Marked for the walk below, which only bodies with long integers need.
      if (exact) request.heldIntegers = [];
      else if (plain) request.bodyText = text;
      done(null, value);
    } catch (error) {
      done(error as Error, undefined);
    }
  });
  // Callback hooks: on every proxied request, so no promise each.
  app.addHook('preValidation', (request, _reply, done) => {
    if (request.method !== 'POST' || request.body === undefined) return done();
    const lax: Readonly<Record<string, LaxKind>> = request.url.startsWith('/v1/completions') ? COMPLETION_LAX_FIELDS : LAX_FIELDS;
    try {
      const coerced = coerceLaxFields(request.body, lax);
      if (coerced) request.bodyText = undefined;
      // A numeric string coerced above may have become a BigInt too (`"seed": "9223372036854775807"`).
      if (request.heldIntegers || (coerced && hasBigInt(request.body))) request.heldIntegers = holdIntegers(request.body);
    } catch (error) {
      return done(error as Error);
    }
    done();
  });
  app.addHook('preHandler', (request, _reply, done) => {
    if (request.heldIntegers) restoreHeld(request.body, request.heldIntegers);
    done();
  });
}

/** Whether a top-level field holds a BigInt (what lax coercion can produce). */
function hasBigInt(body: unknown): boolean {
  if (body === null || typeof body !== 'object') return false;
  for (const key in body) if (typeof (body as Record<string, unknown>)[key] === 'bigint') return true;
  return false;
}

/** The project a request's usage is billed to, as its header names it: `Compat-Project`, else `OpenAI-Project`. */
function projectHeader(headers: FastifyRequest['headers']): EngineCall['projectHeader'] {
  const compat = headers['compat-project'];
  if (typeof compat === 'string') return { name: 'Compat-Project', value: compat };
  const openai = headers['openai-project'];
  return typeof openai === 'string' ? { name: 'OpenAI-Project', value: openai } : undefined;
}

const errorResponses = {
  400: ErrorEnvelope.describe('The engine refused the request (its message and param), or a malformed Compat-Project'),
  401: ErrorEnvelope.describe('Missing or invalid API key'),
  403: ErrorEnvelope.describe('The key cannot reach the Compat-Project project'),
  404: ErrorEnvelope.describe('model_not_found: unknown, unreachable, or no backend configured'),
  422: ValidationErrorBody.describe('The body breaks a field rule'),
  429: ErrorEnvelope.describe('The engine is rate limiting; Retry-After says for how long'),
  500: ErrorEnvelope.describe("engine_error: the engine's own internal error, with its message"),
  501: ErrorEnvelope.describe('not_implemented: the engine does not implement what was asked'),
  502: ErrorEnvelope.describe('upstream_error: the engine failed'),
  503: ErrorEnvelope.describe('upstream_unreachable or upstream_unavailable; Retry-After says when to try again'),
  504: ErrorEnvelope.describe('upstream_timeout'),
};

export const inferenceRoutes: FastifyPluginAsyncZod<InferenceRoutesOptions> = async (app, { gateway, usage, listModels, getModel }) => {
  exactBodies(app);

  const handler = (endpoint: Endpoint) => async (request: FastifyRequest<{ Body: EngineRequestBody }>, reply: FastifyReply) => {
    const headers = request.headers;
    const headerId = headers['x-request-id'];
    const result = await gateway.complete({
      endpoint,
      principal: principalOf(request),
      body: request.body,
      // The fast path took the body as it is: the engine may be sent the client's own text.
      bodyText: request.bodyText !== undefined && validatedFast(request.body) ? request.bodyText : undefined,
      headerRequestId: typeof headerId === 'string' && headerId !== '' ? headerId : undefined,
      generatedRequestId: request.id,
      projectHeader: projectHeader(headers),
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

  const streamed =
    'With `stream: true` the answer is server-sent events (`data: <chunk>` ... `data: [DONE]`), with `: keep-alive` comments while the engine has not sent its first token. ' +
    '`Compat-Project` (or `OpenAI-Project`) names the project usage is recorded under. `X-Request-Id` wins over a body `request_id`.';
  const routes: { path: string; endpoint: Endpoint; summary: string; description: string; body: typeof ChatCompletionRequest | typeof CompletionRequest | typeof TokenizeRequest | typeof DetokenizeRequest; ok: typeof ChatCompletion | typeof Completion | typeof TokenizeResponse | typeof DetokenizeResponse }[] = [
    { path: '/v1/chat/completions', endpoint: 'chat', summary: 'Create a chat completion', description: `OpenAI-compatible. ${streamed}`, body: ChatCompletionRequest, ok: ChatCompletion },
    { path: '/v1/completions', endpoint: 'completions', summary: 'Create a text completion', description: `OpenAI- and vLLM-compatible (prompt-based rollouts, \`echo\` and \`prompt_logprobs\` scoring). ${streamed}`, body: CompletionRequest, ok: Completion },
    { path: '/tokenize', endpoint: 'tokenize', summary: 'Tokenize a prompt or chat messages', description: "vLLM's /tokenize, routed like chat completions (checkpoint names included). Not metered.", body: TokenizeRequest, ok: TokenizeResponse },
    { path: '/detokenize', endpoint: 'detokenize', summary: 'Turn token ids back into text', description: "vLLM's /detokenize, routed like chat completions. Not metered.", body: DetokenizeRequest, ok: DetokenizeResponse },
  ];
  const fast: Partial<Record<Endpoint, FastifySchemaCompiler<unknown>>> = { chat: fastValidatorCompiler(fastChatBody), completions: fastValidatorCompiler(fastCompletionBody) };
  for (const route of routes) {
    const options = {
      schema: { tags, summary: route.summary, description: route.description, body: route.body, response: { 200: route.ok, ...errorResponses } },
      validatorCompiler: fast[route.endpoint],
    };
    app.post(route.path, options, handler(route.endpoint));
    if (route.endpoint === 'chat') app.post(`${route.path}/`, options, handler(route.endpoint));
  }

  app.get(
    '/v1/models',
    { schema: { tags, summary: 'List the models this key can use', response: { 200: ModelList, 401: ErrorEnvelope } } },
    async (request) => listModels(request),
  );
  app.get(
    '/v1/models/*',
    {
      schema: {
        tags,
        summary: 'One model card',
        description: 'The card /v1/models lists for this id (ids may contain slashes); 404 model_not_found otherwise.',
        params: z.object({ '*': ModelParams.shape.model }),
        response: { 200: Model, 401: ErrorEnvelope, 404: ErrorEnvelope },
      },
    },
    async (request) => getModel(request, (request.params as { '*': string })['*']),
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
