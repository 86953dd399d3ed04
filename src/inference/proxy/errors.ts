import { AppError } from '../../errors.js';

/**
 * Errors of the upstream client. Before the first byte a failure is an AppError with a real status;
 * after it (the client already has a 200) it is a StreamInterruptedError, sent as an SSE error event.
 */

export const ENGINE_CODES: Record<number, string> = {
  400: 'invalid_request',
  401: 'upstream_unauthorized',
  403: 'upstream_forbidden',
  404: 'model_not_found',
  413: 'payload_too_large',
  422: 'unprocessable',
  429: 'rate_limit_exceeded',
};

/** The engine answered 4xx: its status, message and param reach the client in the OpenAI envelope. */
export class EngineError extends AppError {
  readonly statusCode: number;
  readonly code: string;
  constructor(
    status: number,
    message: string,
    options: { param?: string | null; retryAfterMs?: number } = {},
  ) {
    super(message, { param: options.param ?? null });
    this.statusCode = status;
    this.code = ENGINE_CODES[status] ?? 'invalid_request';
    this.retryAfterMs = options.retryAfterMs;
  }
  /** From the engine's Retry-After, for the gateway's own Retry-After header. */
  readonly retryAfterMs: number | undefined;
}

/**
 * A 404 for the adapter of a checkpoint deleted after the request was routed to it: the gateway routes a
 * request for a model's latest checkpoint again, to whatever is latest now.
 */
export class RetiredAdapterError extends EngineError {}

/**
 * The engine failed, could not be reached, or timed out. The message is what the client reads: the
 * engine's own message, or what happened in words that name no replica, backend, adapter or path.
 * `detail` says where it happened, for the server log only (the error handler logs it with the error).
 */
export class EngineFault extends AppError {
  readonly statusCode: number;
  readonly code: string;
  /** Where and why, with the replica URL and backend name: logged, never sent. */
  readonly detail: string;
  /** How long the client should wait before trying again (Retry-After), for 503 and 429 answers. */
  readonly retryAfterMs: number | undefined;
  constructor(status: number, code: string, message: string, detail: string, options: { retryAfterMs?: number; cause?: unknown } = {}) {
    super(message);
    this.statusCode = status;
    this.code = code;
    this.detail = detail;
    this.retryAfterMs = options.retryAfterMs;
    if (options.cause !== undefined) this.cause = options.cause;
  }
}

/** What a client is told to wait after an engine could not be reached. */
export const UNREACHABLE_RETRY_AFTER_MS = 1_000;

/** 503 upstream_unreachable with Retry-After: no engine that may serve the model could be reached. */
export function upstreamUnreachable(detail: string): EngineFault {
  return new EngineFault(503, 'upstream_unreachable', 'The engine serving this model could not be reached; try again shortly.', detail, {
    retryAfterMs: UNREACHABLE_RETRY_AFTER_MS,
  });
}

/**
 * The engine refused trainyard's own credentials (401/403): a gateway misconfiguration, not the
 * caller's, so it is a 502; the log names the backend's key variable, the client reads only that the
 * gateway could not authenticate.
 */
export function upstreamUnauthorized(
  backend: { name: string; apiKeyEnv?: string },
  replicaUrl: string,
  status: number,
  engineMessage: string,
): EngineFault {
  const fix = backend.apiKeyEnv
    ? `check that ${backend.apiKeyEnv} holds the key the engine was started with (--api-key)`
    : 'the backend has no api_key_env; set it to the variable holding the engine\'s --api-key';
  return new EngineFault(
    502,
    'upstream_unauthorized',
    'The engine refused the gateway\'s credentials; the operator has to fix the gateway\'s configuration (the server log says how).',
    `replica ${replicaUrl} of backend ${backend.name} refused the gateway's credentials (${status}: ${engineMessage}); ${fix}`,
  );
}

/** The upstream failed after the first byte of a 2xx body had been received. */
export class StreamInterruptedError extends EngineFault {
  constructor(message: string, detail: string, options: { timeout: boolean; cause?: unknown }) {
    super(options.timeout ? 504 : 502, options.timeout ? 'upstream_timeout' : 'upstream_error', message, detail, { cause: options.cause });
  }
}

/** The caller's AbortSignal fired (its client went away); the upstream request has been aborted. */
export class RequestAbortedError extends Error {
  constructor() {
    super('request aborted by the client');
    this.name = 'AbortError';
  }
}

/**
 * How a connection failed, in words the client may read: the error's code (`ECONNRESET`,
 * `UND_ERR_SOCKET`, `ERR_TLS_CERT_ALTNAME_INVALID`, ...), never its message, which may name the replica's
 * host, address or certificate names. The message goes to the log with the error's detail.
 */
export function failureCode(error: unknown): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && /^[A-Z0-9_]{1,64}$/.test(code) ? code : 'connection error';
}

/**
 * The message and param of an engine error body. vLLM ≥0.10.1 nests `{"error":{message,param}}`,
 * older builds are flat `{"object":"error","message"}`, `--api-key` auth sends `{"error":"Unauthorized"}`.
 */
export function engineErrorDetails(text: string, status: number): { message: string; param: string | null } {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return { message: text.trim().slice(0, 1000) || `engine answered ${status}`, param: null };
  }
  const inner = isObject(body) && body.error !== undefined ? body.error : body;
  if (typeof inner === 'string') return { message: inner, param: null };
  if (isObject(inner)) {
    const message = typeof inner.message === 'string' ? inner.message : typeof inner.detail === 'string' ? inner.detail : JSON.stringify(inner);
    return { message, param: typeof inner.param === 'string' ? inner.param : null };
  }
  return { message: `engine answered ${status}`, param: null };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
