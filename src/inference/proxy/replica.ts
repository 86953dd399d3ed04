import { Pool } from 'undici';
import type { IncomingHttpHeaders } from 'node:http';
import { CircuitBreaker, type BreakerOptions } from './breaker.js';

/** One engine process: its connection pool, in-flight count, circuit breaker and Retry-After window. */
export class Replica {
  readonly pool: Pool;
  readonly breaker: CircuitBreaker;
  /** Path prefix of the replica URL (engines behind a path-routing proxy), without a trailing slash. */
  readonly basePath: string;
  /** Requests sent and not yet finished, for least-outstanding-requests balancing. */
  outstanding = 0;
  /** Epoch ms before which the engine asked (Retry-After) not to be sent more work. */
  notBefore = 0;

  constructor(
    readonly url: string,
    options: { connectMs: number; breaker: BreakerOptions; now: () => number },
  ) {
    const parsed = new URL(url);
    this.basePath = parsed.pathname.replace(/\/+$/, '');
    // undici keeps connections alive and sets TCP_NODELAY on every socket it opens. Its own header
    // and body timeouts are off: the client runs first-byte, idle and total timers of its own.
    this.pool = new Pool(parsed.origin, {
      connect: { timeout: options.connectMs },
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    this.breaker = new CircuitBreaker(options.breaker, options.now);
  }

  /**
   * A small request outside the hot path (adapter load/unload, model discovery), with one timeout
   * over the whole exchange.
   */
  async control(options: {
    method: 'GET' | 'POST';
    path: string;
    body?: unknown;
    headers: Record<string, string>;
    timeoutMs: number;
  }): Promise<{ status: number; text: string; headers: IncomingHttpHeaders }> {
    const response = await this.pool.request({
      method: options.method,
      path: this.basePath + options.path,
      headers: options.body === undefined ? options.headers : { ...options.headers, 'content-type': 'application/json' },
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    return { status: response.statusCode, text: await response.body.text(), headers: response.headers };
  }
}

const CONNECT_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** A failure to reach the engine at all: the request never started, so another replica may take it. */
export function isConnectError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && CONNECT_ERROR_CODES.has(code);
}

/** Failures of the engine or its connection once reached (resets, a malformed answer). */
const UPSTREAM_FAULT_CODES = new Set([
  'UND_ERR_SOCKET',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'UND_ERR_HEADERS_OVERFLOW',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
]);

/**
 * Whether an error of a request that was not answered is the engine's fault (counted against its
 * breaker), as opposed to the gateway's own (an invalid header, say), which says nothing of the engine.
 */
export function isUpstreamFault(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (UPSTREAM_FAULT_CODES.has(code) || code.startsWith('HPE_') || CONNECT_ERROR_CODES.has(code));
}

/** A timeout of `control` (AbortSignal.timeout). */
export function isTimeoutError(error: unknown): boolean {
  return (error as { name?: unknown } | null)?.name === 'TimeoutError';
}

/** Retry-After (seconds or an HTTP date) or retry-after-ms, as milliseconds from now. */
export function retryAfterMs(headers: IncomingHttpHeaders, now: number): number | undefined {
  const ms = headers['retry-after-ms'];
  if (typeof ms === 'string' && /^\d+(\.\d+)?$/.test(ms)) return Math.ceil(Number(ms));
  const value = headers['retry-after'];
  if (typeof value !== 'string') return undefined;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.ceil(Number(value) * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
