/**
 * Database faults that are nobody's request's doing: the server is down, frozen, restarting, out of
 * connections, or a statement ran past its time. The error handler answers these 503 with Retry-After
 * (a client retries later) instead of 500 (a bug).
 */

/** What pg's pool throws when no connection became free in time. */
export const POOL_TIMEOUT_MESSAGE = 'timeout exceeded when trying to connect';

/** Seconds a client is told to wait (Retry-After) before trying again after a database fault. */
export const DATABASE_RETRY_AFTER_SECONDS = 5;

export interface DatabaseFault {
  code: 'database_busy' | 'database_unavailable' | 'database_timeout';
  message: string;
}

/** Network errors of a socket to the server: refused, reset, unreachable, timed out, name not found. */
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENOTFOUND', 'EAI_AGAIN']);

/** Messages pg's client throws itself when the connection fails or a timeout of ours fires. */
const CLIENT_MESSAGES = [
  /^Connection terminated/, // unexpectedly, or "due to connection timeout"
  /^Query read timeout$/, // query_timeout
  /^Client has encountered a connection error and is not queryable$/,
  /^Client was closed and is not queryable$/,
  /^Cannot use a pool after calling end on the pool$/,
  /^driver has already been destroyed$/, // kysely's, for a statement after the database was closed (at shutdown)
];

export function databaseFault(error: unknown): DatabaseFault | undefined {
  if (!(error instanceof Error)) return undefined;
  if (error.message === POOL_TIMEOUT_MESSAGE) {
    return { code: 'database_busy', message: 'The database is busy: no connection became free in time (DATABASE_POOL_TIMEOUT_MS). Try again shortly.' };
  }
  if (error instanceof DatabaseUnavailable) return { code: 'database_unavailable', message: error.message };
  const code = (error as { code?: unknown }).code;
  if (code === '57014' || error.message === 'Query read timeout') {
    return {
      code: 'database_timeout',
      message: 'The database did not answer within the statement timeout (DATABASE_STATEMENT_TIMEOUT_MS). Try again shortly, or ask for less at once.',
    };
  }
  const unavailable =
    (typeof code === 'string' && (SOCKET_ERRORS.has(code) || /^(08...|57P0[1-3]|53300)$/.test(code))) ||
    CLIENT_MESSAGES.some((pattern) => pattern.test(error.message)) ||
    (error instanceof AggregateError && error.errors.some((inner) => databaseFault(inner) !== undefined));
  if (unavailable) return { code: 'database_unavailable', message: 'The database is unavailable. Try again shortly.' };
  return undefined;
}

/** Thrown by the database layer itself when it will not run a query (the embedded database failed). */
export class DatabaseUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatabaseUnavailable';
  }
}
