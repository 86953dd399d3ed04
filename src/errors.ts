/**
 * Typed errors thrown by services. One error handler (src/http/error-handler.ts) turns each into the
 * status and body of the API the request was made to; services never build response bodies.
 */
export abstract class AppError extends Error {
  abstract readonly statusCode: number;
  /** A stable machine-readable code (the inference API sends it as `error.code`). */
  abstract readonly code: string;
  /** The request field the error is about, where there is one. */
  readonly param: string | null;
  /** Extra fields some APIs put beside the message (the tracing API's `deleted_at`, say). */
  readonly extra: Record<string, unknown>;

  constructor(message: string, options: { param?: string | null; extra?: Record<string, unknown> } = {}) {
    super(message);
    this.name = new.target.name;
    this.param = options.param ?? null;
    this.extra = options.extra ?? {};
  }
}

export class InvalidRequestError extends AppError {
  readonly statusCode = 400;
  readonly code: string;
  constructor(message: string, options: { code?: string; param?: string | null; extra?: Record<string, unknown> } = {}) {
    super(message, options);
    this.code = options.code ?? 'invalid_request';
  }
}

export class UnauthorizedError extends AppError {
  readonly statusCode = 401;
  readonly code = 'invalid_api_key';
}

export class ForbiddenError extends AppError {
  readonly statusCode = 403;
  readonly code: string;
  constructor(message: string, options: { code?: string; param?: string | null } = {}) {
    super(message, options);
    this.code = options.code ?? 'forbidden';
  }
}

export class NotFoundError extends AppError {
  readonly statusCode = 404;
  readonly code: string;
  /** `new NotFoundError('training job', id)` reads "training job <id> not found". */
  constructor(resource: string, id?: string, options: { code?: string; param?: string | null; extra?: Record<string, unknown>; message?: string } = {}) {
    super(options.message ?? (id === undefined ? `${resource} not found` : `${resource} ${id} not found`), options);
    this.code = options.code ?? 'not_found';
  }
}

export class ConflictError extends AppError {
  readonly statusCode = 409;
  readonly code: string;
  constructor(message: string, options: { code?: string; param?: string | null; extra?: Record<string, unknown> } = {}) {
    super(message, options);
    this.code = options.code ?? 'conflict';
  }
}

export class PayloadTooLargeError extends AppError {
  readonly statusCode = 413;
  readonly code = 'payload_too_large';
}

export class UnsupportedMediaTypeError extends AppError {
  readonly statusCode = 415;
  readonly code = 'unsupported_media_type';
}

/**
 * A semantic validation failure found after the schema passed (a cross-field rule, an unknown cursor).
 * Rendered in the 422 detail form with the given location.
 */
export class UnprocessableError extends AppError {
  readonly statusCode = 422;
  readonly code: string;
  constructor(
    message: string,
    readonly loc: (string | number)[],
    options: { type?: string; input?: unknown; ctx?: Record<string, unknown> } = {},
  ) {
    super(message, { param: loc.slice(1).join('.') || null });
    this.code = options.type ?? 'value_error';
    this.input = options.input;
    this.ctx = options.ctx;
  }
  readonly input: unknown;
  readonly ctx: Record<string, unknown> | undefined;
}

export class RateLimitedError extends AppError {
  readonly statusCode = 429;
  readonly code = 'rate_limit_exceeded';
  /** Sent as Retry-After. */
  readonly retryAfterSeconds: number | undefined;
  constructor(message: string, options: { param?: string | null; retryAfterSeconds?: number } = {}) {
    super(message, { param: options.param });
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** An engine or other upstream answered badly or not at all. */
export class UpstreamError extends AppError {
  readonly statusCode: number;
  readonly code: string;
  constructor(message: string, options: { statusCode?: 502 | 503 | 504; code?: string } = {}) {
    super(message);
    this.statusCode = options.statusCode ?? 502;
    this.code = options.code ?? 'upstream_error';
  }
}

export class ServiceUnavailableError extends AppError {
  readonly statusCode = 503;
  readonly code = 'service_unavailable';
}
