import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request, type Dispatcher } from 'undici';
import type { z } from 'zod';
import { CheckpointReleaseList, ReleasesAcknowledged } from '../training/lifecycle-schemas.js';
import {
  ClaimResponse,
  CompleteResponse,
  HeartbeatResponse,
  WorkerSettingsResponse,
  type ClaimRequest,
  type WorkerEvent,
} from '../training/schemas.js';
import { CLOCK_SKEW_WARN_MS, timeLease } from './lease-clock.js';

/**
 * The worker side of the trainer-worker protocol (docs/training.md, "Worker protocol"). Transient failures
 * (network errors, 408, 429, 5xx) are retried with capped exponential backoff; a 409 means this worker's
 * lease on the job is gone and surfaces as LeaseLostError, never retried.
 */

/** The server no longer honours this lease (swept after a missed heartbeat, or the job was reclaimed). */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
  constructor(
    readonly jobId: string,
    /** The server ended the job CANCELED: no attempt of it runs again (complete answers so after a cancel). */
    readonly canceled = false,
  ) {
    super(canceled ? `job ${jobId} was canceled; no checkpoint was registered (409)` : `the lease on job ${jobId} is no longer valid (409)`);
  }
}

/** Whether a 409's body is the server's answer to a complete after a cancel (src/training/worker-service.ts). */
function canceledAnswer(text: string): boolean {
  try {
    const detail = (JSON.parse(text) as { detail?: unknown }).detail;
    return typeof detail === 'string' && detail.endsWith(' was canceled; no checkpoint was registered.');
  } catch {
    return false;
  }
}

/** A response that retrying will not change: a 4xx other than 408/409/429, or a body of the wrong shape. */
export class ProtocolError extends Error {
  override name = 'ProtocolError';
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export interface Backoff {
  /** First delay; doubles per attempt up to maxDelayMs, with full jitter. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** Give up (rethrowing the last error) once this much time has passed; Infinity to retry until aborted. */
  maxElapsedMs: number;
  /** The level a retry is logged at (default warn). */
  logLevel?: 'warn' | 'debug';
}

/** An answer that carries a lease, and when that lease lapses on this machine's monotonic clock (performance.now()). */
export interface Leased<T> {
  answer: T;
  leaseEndsAt: number;
}

export const DEFAULT_BACKOFF: Backoff = { baseDelayMs: 500, maxDelayMs: 15_000, maxElapsedMs: 120_000 };

interface Logger {
  warn(object: object, message: string): void;
  debug(object: object, message: string): void;
}

export interface WorkerClientOptions {
  serverUrl: string;
  key: string;
  logger: Logger;
  backoff?: Partial<Backoff>;
  /** How long an ordinary call may wait for response headers. */
  requestTimeoutMs?: number;
}

class TransientError extends Error {
  override name = 'TransientError';
  constructor(
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

export class WorkerClient {
  private readonly dispatcher: Dispatcher;
  private readonly backoff: Backoff;
  private readonly requestTimeoutMs: number;
  private clockWarned = false;

  constructor(private readonly options: WorkerClientOptions) {
    this.dispatcher = new Agent({ keepAliveTimeout: 30_000, connect: { timeout: 10_000 } });
    this.backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.requestTimeoutMs = options.requestTimeoutMs ?? 60_000;
  }

  /**
   * Long-polls for a job; undefined when none came within `wait_seconds`. Retries until `signal` aborts,
   * because a worker that outlives a server restart should simply carry on. Every try carries the same
   * `claim_id`: a try whose answer was lost after the server had leased a job gets that job back.
   */
  async claim(request: Omit<ClaimRequest, 'claim_id'>, signal?: AbortSignal): Promise<Leased<ClaimResponse> | undefined> {
    const body: ClaimRequest = { ...request, claim_id: crypto.randomUUID() };
    return this.retrying('claim', { ...this.backoff, maxElapsedMs: Infinity }, signal, async () => {
      const response = await this.call('POST', '/v1/workers/claim', body, {
        signal,
        timeoutMs: (body.wait_seconds ?? 0) * 1000 + this.requestTimeoutMs,
      });
      const arrived = arrival();
      if (response.statusCode === 204) {
        await response.body.dump();
        return undefined;
      }
      const answer = await this.parse(response, ClaimResponse, 'claim');
      return this.leased(answer, answer.lease, response, arrived);
    });
  }

  /**
   * The server's settings for workers, or undefined from a server older than the call (404). Retries until
   * `signal` aborts, like a claim (a worker may start before its server), logging its retries at debug
   * level only: the claims already warn of an unreachable server.
   */
  async settings(signal?: AbortSignal): Promise<WorkerSettingsResponse | undefined> {
    const retries = { ...this.backoff, maxElapsedMs: Infinity, logLevel: 'debug' as const };
    return this.retrying('settings', retries, signal, async () => {
      const response = await this.call('GET', '/v1/workers/settings', undefined, { signal, timeoutMs: this.requestTimeoutMs });
      if (response.statusCode === 404) {
        await response.body.dump();
        return undefined;
      }
      return this.parse(response, WorkerSettingsResponse, 'settings');
    });
  }

  /** Streams the job's inputs (JSON Lines) into `file`, from the start again after a transient failure. */
  async downloadInputs(job: { id: string; inputs_url: string }, file: string, signal?: AbortSignal): Promise<void> {
    const url = /^https?:\/\//.test(job.inputs_url) ? job.inputs_url : `${this.options.serverUrl}${job.inputs_url}`;
    await this.retrying(`inputs of ${job.id}`, this.backoff, signal, async () => {
      const response = await this.send('GET', url, undefined, { signal, timeoutMs: this.requestTimeoutMs });
      await this.expectOk(response, job.id);
      try {
        await pipeline(response.body, fs.createWriteStream(file), { signal });
      } catch (error) {
        if (signal?.aborted) throw error;
        throw new TransientError(`inputs download broke off: ${(error as Error).message}`);
      }
    });
  }

  /**
   * Renews a lease. Each try waits `timeoutMs` at most for the answer, and tries stop after `retryForMs` (what
   * is left of the lease): past it the server has requeued the job, and only a new heartbeat finds out.
   */
  async heartbeat(
    jobId: string,
    leaseToken: string,
    limits: { timeoutMs: number; retryForMs: number },
    signal?: AbortSignal,
  ): Promise<Leased<HeartbeatResponse>> {
    const backoff = { ...this.backoff, maxElapsedMs: Math.max(0, limits.retryForMs) };
    return this.retrying(`heartbeat of ${jobId}`, backoff, signal, async () => {
      const response = await this.call('POST', jobPath(jobId, 'heartbeat'), { lease_token: leaseToken }, { signal, timeoutMs: limits.timeoutMs });
      const arrived = arrival();
      const answer = await this.parse(response, HeartbeatResponse, 'heartbeat', jobId);
      return this.leased(answer, answer, response, arrived);
    });
  }

  /**
   * `firstSeq`: how many events this attempt posted before these. With it a retry after a lost response
   * is safe: the server answers the events it already stored instead of appending them again.
   */
  async postEvents(jobId: string, leaseToken: string, events: readonly WorkerEvent[], firstSeq?: number, signal?: AbortSignal): Promise<void> {
    await this.jobCall(jobId, 'events', { lease_token: leaseToken, events, first_seq: firstSeq }, undefined, signal);
  }

  /** Idempotent with the same token (the server returns the first result), so retrying it is safe. */
  async complete(
    jobId: string,
    leaseToken: string,
    checkpoint: { uri: string; metrics: Record<string, number> },
    signal?: AbortSignal,
  ): Promise<CompleteResponse> {
    return this.jobCall(jobId, 'complete', { lease_token: leaseToken, checkpoint }, CompleteResponse, signal);
  }

  async fail(jobId: string, leaseToken: string, errorMessage: string, retryable: boolean, signal?: AbortSignal): Promise<void> {
    await this.jobCall(jobId, 'fail', { lease_token: leaseToken, error_message: errorMessage, retryable }, undefined, signal);
  }

  /** One page of the storage releases this key reaches, oldest first, after the release `after` (docs/training.md). */
  async listReleases(page: { after?: string; limit: number }, signal?: AbortSignal): Promise<CheckpointReleaseList['data']> {
    const query = new URLSearchParams({ limit: String(page.limit), ...(page.after === undefined ? {} : { after: page.after }) });
    return this.retrying('release list', this.backoff, signal, async () => {
      const response = await this.call('GET', `/v1/workers/checkpoint-releases?${query}`, undefined, { signal, timeoutMs: this.requestTimeoutMs });
      return (await this.parse(response, CheckpointReleaseList, 'release list')).data;
    });
  }

  /** Tells the server these releases are done; answers how many it forgot. */
  async acknowledgeReleases(ids: readonly string[], signal?: AbortSignal): Promise<number> {
    return this.retrying('release acknowledgement', this.backoff, signal, async () => {
      const response = await this.call('POST', '/v1/workers/checkpoint-releases/ack', { ids }, { signal, timeoutMs: this.requestTimeoutMs });
      return (await this.parse(response, ReleasesAcknowledged, 'release acknowledgement')).acknowledged;
    });
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }

  private async jobCall<S extends z.ZodType>(
    jobId: string,
    action: string,
    body: unknown,
    schema: S | undefined,
    signal: AbortSignal | undefined,
  ): Promise<z.output<S>> {
    return this.retrying(`${action} of ${jobId}`, this.backoff, signal, async () => {
      const response = await this.call('POST', jobPath(jobId, action), body, { signal, timeoutMs: this.requestTimeoutMs });
      if (schema) return this.parse(response, schema, action, jobId);
      await this.expectOk(response, jobId);
      await response.body.dump();
      return undefined as z.output<S>;
    });
  }

  /**
   * Times the lease an answer carries from the server's own clock (lease-clock.ts), and warns once when the
   * server's clock and this machine's disagree.
   */
  private leased<T>(
    answer: T,
    lease: { expires_at: string; expires_in_ms?: number },
    response: Dispatcher.ResponseData,
    arrived: { monotonic: number; wall: number },
  ): Leased<T> {
    const date = response.headers.date;
    const timing = timeLease({ ...lease, date: Array.isArray(date) ? date[0] : date, arrived });
    const ahead = timing.serverAheadMs;
    if (!this.clockWarned && ahead !== undefined && Math.abs(ahead) > CLOCK_SKEW_WARN_MS) {
      this.clockWarned = true;
      this.options.logger.warn(
        { server_clock_ahead_ms: Math.round(ahead) },
        `this machine's clock is ${Math.round(Math.abs(ahead) / 1000)} s ${ahead > 0 ? 'behind' : 'ahead of'} the server's: ` +
          'leases are timed from the server\'s answers, so jobs are not affected, but log times differ from the server\'s, ' +
          'and a clock minutes ahead shortens the margin of the checkpoint storage sweep. Synchronize the clocks (NTP).',
      );
    }
    return { answer, leaseEndsAt: timing.endsAt };
  }

  private call(method: 'GET' | 'POST', path: string, body: unknown, options: { signal?: AbortSignal; timeoutMs: number }) {
    return this.send(method, `${this.options.serverUrl}${path}`, body, options);
  }

  private async send(
    method: 'GET' | 'POST',
    url: string,
    body: unknown,
    options: { signal?: AbortSignal; timeoutMs: number },
  ): Promise<Dispatcher.ResponseData> {
    try {
      return await request(url, {
        method,
        dispatcher: this.dispatcher,
        signal: options.signal,
        headersTimeout: options.timeoutMs,
        bodyTimeout: this.requestTimeoutMs,
        headers: {
          authorization: `Bearer ${this.options.key}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      throw new TransientError(`${method} ${url}: ${(error as Error).message}`);
    }
  }

  private async parse<S extends z.ZodType>(
    response: Dispatcher.ResponseData,
    schema: S,
    action: string,
    jobId?: string,
  ): Promise<z.output<S>> {
    await this.expectOk(response, jobId);
    let body: unknown;
    try {
      body = await response.body.json();
    } catch (error) {
      // A body that is not JSON is the server's (or a proxy's) mistake; one that broke off on the way is
      // retried like any lost answer (a claim's retry carries its claim_id and gets the same job back).
      if (error instanceof SyntaxError) throw new ProtocolError(`unexpected ${action} response: ${error.message}`, response.statusCode);
      throw new TransientError(`the ${action} answer broke off: ${(error as Error).message}`);
    }
    const parsed = schema.safeParse(body);
    if (!parsed.success) throw new ProtocolError(`unexpected ${action} response: ${parsed.error.message}`, response.statusCode);
    return parsed.data;
  }

  /** Returns for 2xx; otherwise consumes the body and throws the error that says what to do next. */
  private async expectOk(response: Dispatcher.ResponseData, jobId?: string): Promise<void> {
    const status = response.statusCode;
    if (status >= 200 && status < 300) return;
    const text = await response.body.text().catch(() => '');
    if (status === 409 && jobId !== undefined) throw new LeaseLostError(jobId, canceledAnswer(text));
    if (status === 408 || status === 429 || status >= 500) {
      throw new TransientError(`HTTP ${status}: ${text.slice(0, 500)}`, retryAfterMs(response.headers['retry-after']));
    }
    throw new ProtocolError(`HTTP ${status}: ${text.slice(0, 500)}`, status);
  }

  private async retrying<T>(what: string, backoff: Backoff, signal: AbortSignal | undefined, attempt: () => Promise<T>): Promise<T> {
    const started = performance.now();
    for (let n = 0; ; n++) {
      try {
        return await attempt();
      } catch (error) {
        if (!(error instanceof TransientError) || signal?.aborted) throw error;
        const jittered = Math.random() * Math.min(backoff.maxDelayMs, backoff.baseDelayMs * 2 ** n);
        const delay = Math.max(jittered, error.retryAfterMs ?? 0);
        if (performance.now() - started + delay > backoff.maxElapsedMs) throw new Error(`${what}: gave up after ${n + 1} tries: ${error.message}`);
        this.options.logger[backoff.logLevel ?? 'warn']({ err: error.message, retry_in_ms: Math.round(delay) }, `${what} failed; retrying`);
        await sleep(delay, undefined, { signal });
      }
    }
  }
}

function jobPath(jobId: string, action: string): string {
  return `/v1/workers/jobs/${encodeURIComponent(jobId)}/${action}`;
}

/** When an answer's head arrived, on this machine's monotonic and wall clocks. */
function arrival(): { monotonic: number; wall: number } {
  return { monotonic: performance.now(), wall: Date.now() };
}

function retryAfterMs(header: string | string[] | undefined): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined) return undefined;
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds >= 0 ? Math.min(seconds * 1000, 60_000) : undefined;
}
