import type { IncomingMessage } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { allowedMethods, MAX_PARAM_LENGTH } from './routes-at-path.js';
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
 * A path as its API is read from it: empty and `.` segments, and a segment's `;` parameters, count for
 * nothing, so that paths no route matches (`/v1//health`, `/v1/health;x=1`, `/v1/health/`) answer in
 * the same form as the path they resemble.
 */
function familyPath(path: string): string {
  const segments = path.split('/').map((segment) => segment.split(';', 1)[0]);
  return `/${segments.filter((segment) => segment !== '' && segment !== '.').join('/')}`;
}

/**
 * The API a path belongs to. A request no route matched (`unmatched`) under /v1 and outside the
 * training families is taken for an OpenAI route the gateway does not serve (/v1/embeddings,
 * /v1/responses): the openai SDKs read only OpenAI's envelope.
 */
export function apiFamily(url: string, unmatched = false): ApiFamily {
  const path = familyPath(url.split('?', 1)[0]);
  if (path.startsWith('/traces') || under(path, ['/graphql'])) return 'tracing';
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
        // An invalid JSON body's loc is the character offset where parsing stopped, not a field.
        param: first && first.type !== 'json_invalid' ? first.loc.slice(1).join('.') || null : null,
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
  // The router's own refusals, handed over by sendFrameworkError.
  FST_ERR_BAD_URL: (request) => ({
    status: 400,
    code: 'invalid_url',
    message: request.url.startsWith('/')
      ? `Malformed percent-encoding in the path ${shownPath(request.url)}: each % must start an escape (%XX) of valid UTF-8.`
      : `The request target ${shownPath(request.url)} is not a path: it must start with "/".`,
  }),
  FST_ERR_MAX_PARAM_LENGTH: () => ({
    status: 414,
    code: 'uri_too_long',
    message: `A path parameter is longer than the limit of ${MAX_PARAM_LENGTH} characters.`,
  }),
};

/** At most this much of a path is echoed in a message: a request line may be 16 KB. */
const SHOWN_PATH_CHARS = 256;

/** A request's path, without its query, cut to SHOWN_PATH_CHARS, to be quoted in a message. */
function shownPath(url: string): string {
  const path = url.split('?', 1)[0];
  return path.length > SHOWN_PATH_CHARS ? `${path.slice(0, SHOWN_PATH_CHARS)}…` : path;
}

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

/**
 * Fastify's `frameworkErrors` (src/app.ts): a path the router cannot read (malformed percent-encoding, a
 * request target that is not a path, a parameter over MAX_PARAM_LENGTH) answered in its API's form. The
 * router refuses it before any hook runs, so the headers every answer carries are set here.
 */
export function sendFrameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  setCommonHeaders(request, reply);
  void sendError(request, reply, error);
}

/**
 * The headers every answer carries (the app's onRequest hook sets them): the request id, and no browser may
 * sniff a JSON answer into HTML or frame a page of this server (/docs included). The web UI replaces the
 * policy with its full one (src/ui/plugin.ts).
 */
export function setCommonHeaders(request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-request-id', request.id);
  reply.header('x-content-type-options', 'nosniff');
  reply.header('content-security-policy', "frame-ancestors 'none'");
  reply.header('x-frame-options', 'DENY');
}

/**
 * The answer to a request no route matched: 405 with `Allow` when the path has routes for other methods
 * (OPTIONS included: trainyard serves no CORS preflight, and FastAPI answers OPTIONS the same way), 404
 * otherwise. `alsoAllowed` names methods a scope's own not-found handler serves at the path (the web UI's
 * deep links). Neither needs a key: the auth hook lets unmatched requests through (request.is404).
 */
export function sendNotFound(request: FastifyRequest, reply: FastifyReply, alsoAllowed: readonly string[] = []): FastifyReply {
  const path = request.url.split('?', 1)[0];
  const allowed = [...new Set([...allowedMethods(request.server, path), ...alsoAllowed])];
  const family = apiFamily(request.url, true);
  if (allowed.length > 0 && !allowed.includes(request.method)) {
    return reply
      .status(405)
      .header('allow', allowed.join(', '))
      .send(
        errorBody(family, {
          status: 405,
          message: `Method ${request.method} is not allowed on ${shownPath(path)}; it allows ${allowed.join(', ')}.`,
          code: 'method_not_allowed',
          param: null,
          extra: {},
        }),
      );
  }
  return reply.status(404).send(
    errorBody(family, { status: 404, message: `No route for ${request.method} ${shownPath(path)}.`, code: 'not_found', param: null, extra: {} }),
  );
}

export function registerErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error, request, reply) => sendError(request, reply, error));
  app.setNotFoundHandler((request, reply) => sendNotFound(request, reply));
}
