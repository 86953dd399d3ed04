import type { IncomingMessage } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DATABASE_RETRY_AFTER_SECONDS, databaseFault } from '../db/faults.js';
import { MAX_BIND_PARAMETERS, TooManyParametersError } from '../db/limits.js';
import { isRefusedValue, sqlState } from '../db/refusals.js';
import { AppError, RateLimitedError, UnprocessableError } from '../errors.js';
import { boundedInput, RequestValidationError, type ValidationDetail } from './validation.js';

/**
 * The three APIs answer errors in three forms (DESIGN.md, "Errors"):
 *   training  {"detail": "<message>"}
 *   inference {"error": {"message", "type", "param", "code"}}  (OpenAI's envelope)
 *   tracing   {"reason": "<message>"}
 * Validation failures are the FastAPI 422 detail form everywhere. This file is the one place that
 * turns an error into a status and a body.
 */
export type ApiFamily = 'training' | 'inference' | 'tracing';

const INFERENCE_PATHS = ['/v1/chat/completions', '/v1/completions', '/v1/models', '/v1/usage', '/tokenize', '/detokenize'];
/** The other families under /v1, which answer in the training form: training, health, system check, admin, workers, projects. */
const TRAINING_V1_PATHS = ['/v1/preview', '/v1/health', '/v1/system-check', '/v1/admin', '/v1/workers', '/v1/projects'];

const under = (path: string, prefixes: readonly string[]) => prefixes.some((prefix) => path === prefix || path.startsWith(`${prefix}/`));

/**
 * The API a path belongs to. A request no route matched (`unmatched`) under /v1 and outside the
 * training families is taken for an OpenAI route the gateway does not serve (/v1/embeddings,
 * /v1/responses): the openai SDKs read only OpenAI's envelope.
 */
export function apiFamily(url: string, unmatched = false): ApiFamily {
  const path = url.split('?', 1)[0];
  if (path.startsWith('/traces') || path === '/graphql') return 'tracing';
  if (under(path, INFERENCE_PATHS)) return 'inference';
  if (unmatched && path.startsWith('/v1/') && !under(path, TRAINING_V1_PATHS)) return 'inference';
  return 'training';
}

interface ErrorShape {
  status: number;
  message: string;
  code: string;
  param: string | null;
  extra: Record<string, unknown>;
  detail?: ValidationDetail[];
  /** Sent as Retry-After: the fault is temporary. */
  retryAfterSeconds?: number;
}

/** OpenAI's `type` vocabulary, by status. */
export function openAiType(status: number): string {
  if (status === 429) return 'rate_limit_exceeded';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

export function errorBody(family: ApiFamily, shape: ErrorShape): Record<string, unknown> {
  if (shape.detail) {
    if (family !== 'inference') return { detail: shape.detail };
    // The openai SDKs read only `body.error`; giving it too lets them surface param and message.
    const first = shape.detail[0];
    return {
      detail: shape.detail,
      error: {
        message: shape.detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; '),
        type: 'invalid_request_error',
        param: first ? first.loc.slice(1).join('.') || null : null,
        code: first?.type ?? 'invalid_request',
      },
    };
  }
  switch (family) {
    case 'training':
      return { detail: shape.message, ...shape.extra };
    case 'tracing':
      return { reason: shape.message, ...shape.extra };
    case 'inference':
      return {
        error: { message: shape.message, type: openAiType(shape.status), param: shape.param, code: shape.code, ...shape.extra },
      };
  }
}

/** Fastify's own client errors, by code, as status and message a client can act on. */
const FASTIFY_ERRORS: Record<string, (request: FastifyRequest) => Omit<ErrorShape, 'extra' | 'param'>> = {
  FST_ERR_CTP_BODY_TOO_LARGE: (request) => ({
    status: 413,
    code: 'payload_too_large',
    message: `Request body is larger than the limit of ${request.routeOptions.bodyLimit} bytes.`,
  }),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (request) => ({
    status: 415,
    code: 'unsupported_media_type',
    message: `Unsupported content type: ${request.headers['content-type'] ?? 'none'}. Send application/json.`,
  }),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => ({
    status: 400,
    code: 'invalid_content_length',
    message: 'Request body size did not match Content-Length.',
  }),
};

/**
 * Input nested deeper than V8 or Postgres can recurse (thousands of levels) is the client's doing.
 * Postgres reports it as SQLSTATE 54001.
 */
function isTooDeep(error: unknown): boolean {
  return (error instanceof RangeError && /call stack/i.test(error.message)) || sqlState(error) === '54001';
}


/**
 * The request body stopped arriving because the client went away: Node fails the request stream with
 * `aborted` (ECONNRESET), which would otherwise pass for a database socket's reset.
 */
function clientWentAway(error: unknown, request: FastifyRequest): boolean {
  return (error as { code?: unknown })?.code === 'ECONNRESET' && (request.raw.readableAborted || request.raw.destroyed);
}

function valueError(msg: string, error: string): ErrorShape {
  return {
    status: 422,
    message: msg,
    code: 'value_error',
    param: null,
    extra: {},
    detail: [{ type: 'value_error', loc: ['body'], msg, input: null, ctx: { error } }],
  };
}

function toShape(error: unknown, request: FastifyRequest): ErrorShape | undefined {
  if (error instanceof RequestValidationError) {
    return { status: 422, message: error.message, code: 'validation_error', param: null, extra: {}, detail: error.detail };
  }
  if (error instanceof UnprocessableError) {
    // Bounded, and BigInt-safe: a gateway input may be an integer past a double's range, which JSON.stringify refuses.
    const detail: ValidationDetail = { type: error.code, loc: error.loc, msg: error.message, input: boundedInput(error.input ?? null) };
    if (error.ctx) detail.ctx = error.ctx;
    return { status: 422, message: error.message, code: error.code, param: error.param, extra: {}, detail: [detail] };
  }
  if (error instanceof AppError) {
    const retryAfterSeconds = error instanceof RateLimitedError ? error.retryAfterSeconds : undefined;
    return { status: error.statusCode, message: error.message, code: error.code, param: error.param, extra: error.extra, retryAfterSeconds };
  }
  const fastifyError = error as FastifyError;
  const known = fastifyError?.code ? FASTIFY_ERRORS[fastifyError.code] : undefined;
  if (known) return { ...known(request), param: null, extra: {} };
  if (clientWentAway(error, request)) {
    return { status: 400, message: 'The client closed the connection before the whole request arrived.', code: 'client_closed_request', param: null, extra: {} };
  }
  const fault = databaseFault(error);
  if (fault) return { status: 503, message: fault.message, code: fault.code, param: null, extra: {}, retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS };
  if (error instanceof TooManyParametersError) {
    return valueError(
      `Value error, the request names too many values to process at once (at most ${MAX_BIND_PARAMETERS}); send fewer in each request`,
      'too many values',
    );
  }
  if (isTooDeep(error)) return valueError('Value error, the request is nested too deeply to process', 'nested too deeply');
  if (isRefusedValue(error)) {
    request.log.warn({ err: error }, 'database refused a value from the request');
    return valueError(
      'Value error, a value in the request is out of the range or form the database accepts (too large a number, too long a name, or a NUL character)',
      `SQLSTATE ${sqlState(error)}`,
    );
  }
  const status = fastifyError?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return { status, message: fastifyError.message, code: 'invalid_request', param: null, extra: {} };
  }
  return undefined;
}

/** At most this much more of a refused body is read and thrown away (or for this long) before the answer. */
const DISCARD_CAP_BYTES = 256 * 1024 * 1024;
const DISCARD_TIMEOUT_MS = 30_000;

/**
 * Reads and throws away what is left of a request body, up to DISCARD_CAP_BYTES or DISCARD_TIMEOUT_MS;
 * resolves when it has ended, or at the cap. A 413 is answered after this: closing the connection while
 * the client is still sending makes the kernel answer the unread bytes with a reset, which takes the 413
 * with it, and clients then report a broken connection (EPIPE, ECONNRESET) and retry the same body.
 */
function discardRestOfBody(raw: IncomingMessage): Promise<void> {
  if (raw.complete || raw.readableEnded || raw.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let discarded = 0;
    const done = () => {
      clearTimeout(timer);
      raw.off('data', onData).off('end', done).off('error', done).off('close', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      discarded += chunk.length;
      if (discarded > DISCARD_CAP_BYTES) done();
    };
    const timer = setTimeout(done, DISCARD_TIMEOUT_MS);
    raw.on('data', onData).once('end', done).once('error', done).once('close', done);
    raw.resume();
  });
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: unknown): FastifyReply | Promise<FastifyReply> {
  const family = apiFamily(request.url, request.is404);
  const shape = toShape(error, request);
  if (!shape) {
    request.log.error({ err: error }, 'unhandled error');
    return reply.status(500).send(
      errorBody(family, {
        status: 500,
        message: 'Internal server error. The request id in the x-request-id header identifies it in the server log.',
        code: 'internal_error',
        param: null,
        extra: {},
      }),
    );
  }
  if (shape.status >= 500) request.log.error({ err: error }, shape.message);
  if (shape.retryAfterSeconds !== undefined) reply.header('retry-after', String(shape.retryAfterSeconds));
  const send = () => reply.status(shape.status).send(errorBody(family, shape));
  return shape.status === 413 ? discardRestOfBody(request.raw).then(send) : send();
}

export function registerErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error, request, reply) => sendError(request, reply, error));
  app.setNotFoundHandler((request, reply) =>
    reply.status(404).send(
      errorBody(apiFamily(request.url, true), {
        status: 404,
        message: `No route for ${request.method} ${request.url.split('?', 1)[0]}.`,
        code: 'not_found',
        param: null,
        extra: {},
      }),
    ),
  );
}
