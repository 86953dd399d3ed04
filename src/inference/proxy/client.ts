import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import type { BackendConfig } from '../backends/config.js';
import type { BodyFlow, BodySink, BodySource } from '../stream.js';
import { AdapterLoader, type AdapterSpec } from './adapters.js';
import { Cancel, sleep, type CancelSignal } from './cancel.js';
import { DEFAULT_BREAKER, type BreakerOptions } from './breaker.js';
import { EngineError, engineErrorDetails, EngineFault, RequestAbortedError, StreamInterruptedError, upstreamUnauthorized } from './errors.js';
import { isConnectError, isUpstreamFault, Replica, retryAfterMs } from './replica.js';

export interface UpstreamRequest {
  method?: 'GET' | 'POST';
  /** Path below the replica URL, e.g. `/v1/chat/completions`. */
  path: string;
  /** The serialised body, resent as is when a retry goes to another replica. */
  body?: string | Buffer;
  /** Extra headers (x-request-id, ...); content-type and the backend's key are added here. */
  headers?: Record<string, string>;
  /** Aborting it (the client went away) aborts the upstream request at any stage. */
  signal?: CancelSignal;
  /** A LoRA adapter to load on the chosen replica before sending. */
  adapter?: AdapterSpec;
  /**
   * The engine sends the body only once generation is done (a non-streaming completion): no
   * first-byte timer, the total timeout bounds the wait.
   */
  wholeBody?: boolean;
}

export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The replica that answered. */
  replica: string;
  /**
   * The body as the engine sent it, chunk by chunk, the first chunk already received. Iterate it
   * (or call bytes) once; breaking out of the loop aborts the upstream request. Failures while
   * iterating are StreamInterruptedError (or RequestAbortedError).
   */
  body: AsyncIterable<Buffer> & BodySource;
  /** The whole body (or iterate `body`: one of them, once). */
  bytes(): Promise<Buffer>;
  /** Aborts the upstream request when the body is not wanted. */
  discard(): void;
}

/** A model as an engine's /v1/models lists it. */
export interface EngineModelCard {
  id: string;
  root?: string | null;
  parent?: string | null;
  max_model_len?: unknown;
}

export interface ClientOptions {
  breaker?: BreakerOptions;
  /** Sends of one request, the first included. */
  maxAttempts?: number;
  /** The longest Retry-After the client waits out itself before a retry; longer ones go to the caller. */
  maxRetryWaitMs?: number;
  now?: () => number;
}

/** 429 and these 5xx mean "not now" from an engine or its load balancer: another replica may serve. */
const RETRYABLE_STATUS = new Set([429, 502, 503, 504]);
const ERROR_BODY_LIMIT = 64 * 1024;

/** Wraps the error of an attempt that may be retried on another replica. */
class RetryableFailure {
  constructor(readonly error: Error) {}
}

type TimeoutKind = 'first byte' | 'idle' | 'total';

/**
 * The upstream client of one backend: a pool per replica, least-outstanding-requests balancing,
 * retries before the first byte, a circuit breaker per replica, and separate connect, first-byte,
 * idle and total timeouts. Independent of Fastify; the routes hand it bodies and an AbortSignal.
 */
export class BackendClient {
  readonly replicas: readonly Replica[];
  readonly adapters: AdapterLoader;
  private readonly baseHeaders: Record<string, string>;
  private readonly maxAttempts: number;
  private readonly maxRetryWaitMs: number;
  private readonly now: () => number;
  private nextStart = 0;

  constructor(
    readonly backend: BackendConfig,
    options: ClientOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.maxAttempts = options.maxAttempts ?? 3;
    this.maxRetryWaitMs = options.maxRetryWaitMs ?? 2_000;
    const breaker = options.breaker ?? DEFAULT_BREAKER;
    this.replicas = backend.replicas.map(
      (url) => new Replica(url, { connectMs: backend.timeouts.connectMs, breaker, now: this.now }),
    );
    this.baseHeaders = backend.apiKey ? { authorization: `Bearer ${backend.apiKey}` } : {};
    this.adapters = new AdapterLoader(backend, this.baseHeaders, backend.timeouts.adapterLoadMs);
  }

  /**
   * Sends a request and resolves when the first byte of a 2xx body has arrived (or rejects with the
   * reason it never did: EngineError for an engine 4xx, EngineFault otherwise, RequestAbortedError
   * when the signal fired). Only here, before the first byte, is a request retried.
   */
  async send(request: UpstreamRequest): Promise<UpstreamResponse> {
    if (request.signal?.aborted) throw new RequestAbortedError();
    const deadline = this.now() + this.backend.timeouts.totalMs;
    const failed = new Set<Replica>();
    let lastError: Error | undefined;
    for (let attempt = 0; attempt < this.maxAttempts; attempt++) {
      const replica = attempt === 0 ? this.pickFirst() : await this.pickRetry(failed, deadline, request.signal);
      if (!replica) break;
      try {
        return await this.attempt(replica, request, deadline);
      } catch (error) {
        if (!(error instanceof RetryableFailure)) throw error;
        failed.add(replica);
        lastError = error.error;
      }
    }
    throw (
      lastError ??
      new EngineFault(
        503,
        'upstream_unavailable',
        'The engines serving this model failed repeatedly and are rested for a while; try again shortly.',
        `no replica of backend ${this.backend.name} is available (circuit open after repeated failures)`,
        { retryAfterMs: Math.max(1_000, Math.min(...this.replicas.map((r) => r.breaker.reopensInMs()))) },
      )
    );
  }

  /** Base and adapter model ids a replica serves, read from its /v1/models. */
  async listModels(
    replica: Replica = this.replicas[0],
    timeoutMs = this.backend.timeouts.firstByteMs,
  ): Promise<EngineModelCard[]> {
    const response = await replica.control({ method: 'GET', path: '/v1/models', headers: this.baseHeaders, timeoutMs });
    if (response.status !== 200) {
      const { message } = engineErrorDetails(response.text, response.status);
      throw new EngineFault(502, 'upstream_error', message, `replica ${replica.url} of backend ${this.backend.name} answered ${response.status} to /v1/models: ${message}`);
    }
    const body = JSON.parse(response.text) as { data?: EngineModelCard[] };
    return body.data ?? [];
  }

  async close(): Promise<void> {
    await Promise.all(this.replicas.map((replica) => replica.pool.close()));
  }

  /** Least outstanding requests among replicas whose breaker admits one; Retry-After windows are avoided when possible. */
  private pickFirst(): Replica | undefined {
    const now = this.now();
    return this.leastOutstanding((r) => r.breaker.canPass() && r.notBefore <= now) ?? this.leastOutstanding((r) => r.breaker.canPass());
  }

  /** Another replica now, or one whose Retry-After ends soon enough to wait for; undefined to give up. */
  private async pickRetry(failed: Set<Replica>, deadline: number, signal: CancelSignal | undefined): Promise<Replica | undefined> {
    const now = this.now();
    const fresh = this.leastOutstanding((r) => !failed.has(r) && r.breaker.canPass() && r.notBefore <= now);
    if (fresh) return fresh;
    let soonest: Replica | undefined;
    for (const r of this.replicas) {
      if (r.notBefore > now && r.breaker.canPass() && (!soonest || r.notBefore < soonest.notBefore)) soonest = r;
    }
    if (!soonest || soonest.notBefore - now > this.maxRetryWaitMs || soonest.notBefore >= deadline) return undefined;
    await sleep(soonest.notBefore - now, signal, () => new RequestAbortedError());
    return soonest;
  }

  private leastOutstanding(eligible: (replica: Replica) => boolean): Replica | undefined {
    // Starting the scan at a rotating index spreads ties instead of piling them on the first replica.
    const count = this.replicas.length;
    const start = this.nextStart++ % count;
    let best: Replica | undefined;
    for (let i = 0; i < count; i++) {
      const replica = this.replicas[(start + i) % count];
      if (eligible(replica) && (!best || replica.outstanding < best.outstanding)) best = replica;
    }
    return best;
  }

  private async attempt(replica: Replica, request: UpstreamRequest, deadline: number): Promise<UpstreamResponse> {
    const { signal } = request;
    if (request.adapter) {
      try {
        await this.adapters.ensureLoaded(replica, request.adapter, signal);
      } catch (error) {
        if (!isConnectError(error)) throw error;
        replica.breaker.onFailure();
        throw new RetryableFailure(this.unreachable(replica, error));
      }
    }

    const timeouts = this.backend.timeouts;
    const controller = new Cancel();
    let timedOut: TimeoutKind | undefined;
    let body: Readable | undefined;
    /** When the last chunk arrived (performance.now()): a chunk records it, and the idle timer reads it when it fires. */
    let lastChunkAt = 0;
    const expire = (kind: TimeoutKind) => () => {
      if (kind === 'idle') {
        // Chunks the engine sent that the consumer has not taken yet: the wait is the client's
        // (backpressure), not the engine's, so the idle timer starts again.
        if (body !== undefined && body.readableLength > 0) {
          phaseTimer?.refresh();
          return;
        }
        // A chunk came since the timer was set: wait out the rest of the idle time after it. (Cheaper
        // than moving the timer on every chunk, of which a stream has about one a token.)
        const quiet = performance.now() - lastChunkAt;
        if (quiet < timeouts.idleMs) {
          phaseTimer = setTimeout(expire('idle'), Math.ceil(timeouts.idleMs - quiet));
          return;
        }
      }
      timedOut = kind;
      controller.abort();
    };
    const totalTimer = setTimeout(expire('total'), Math.max(0, deadline - this.now()));
    // A non-streaming completion sends nothing until it is done, so only the total timeout bounds it.
    let phaseTimer: NodeJS.Timeout | undefined = request.wholeBody ? undefined : setTimeout(expire('first byte'), timeouts.firstByteMs);
    const onClientAbort = () => controller.abort();
    signal?.addEventListener('abort', onClientAbort, { once: true });

    replica.outstanding++;
    replica.breaker.onSend();
    let released = false;
    let judged = false;
    const release = () => {
      if (released) return;
      released = true;
      clearTimeout(totalTimer);
      clearTimeout(phaseTimer);
      signal?.removeEventListener('abort', onClientAbort);
      replica.outstanding--;
      if (!judged) replica.breaker.onAbandon();
    };
    const judge = (ok: boolean) => {
      judged = true;
      if (ok) replica.breaker.onSuccess();
      else replica.breaker.onFailure();
    };
    /**
     * The error for a failure before the first byte. Only the engine's faults count against its
     * breaker: connect and socket errors and first-byte or idle timeouts. The total timeout bounds a
     * long generation (or a slow client), and an error building the request is the gateway's own.
     */
    const failure = (error: unknown): Error | RetryableFailure => {
      release();
      if (timedOut) {
        if (timedOut !== 'total') judge(false);
        return this.timeout(replica, timedOut);
      }
      if (signal?.aborted) return new RequestAbortedError();
      if (isConnectError(error)) {
        judge(false);
        return new RetryableFailure(this.unreachable(replica, error));
      }
      if (isUpstreamFault(error)) judge(false);
      const reason = (error as Error).message;
      return new EngineFault(502, 'upstream_error', `The engine failed before answering: ${reason}`, `replica ${replica.url} of backend ${this.backend.name} failed: ${reason}`, { cause: error });
    };

    let response;
    try {
      response = await replica.pool.request({
        method: request.method ?? 'POST',
        path: replica.basePath + request.path,
        headers: request.body === undefined
          ? { ...this.baseHeaders, ...request.headers }
          : { 'content-type': 'application/json', ...this.baseHeaders, ...request.headers },
        body: request.body,
        signal: controller,
      });
    } catch (error) {
      throw failure(error);
    }
    body = response.body as Readable;
    // The stream closes when it ends, fails, or is destroyed by an abort or timer: the one place to release.
    body.once('close', release);

    if (response.statusCode >= 400) {
      let text = '';
      try {
        text = await readCapped(body!, ERROR_BODY_LIMIT);
      } catch (error) {
        throw failure(error);
      }
      const status = response.statusCode;
      const waitMs = retryAfterMs(response.headers, this.now());
      if (waitMs !== undefined && RETRYABLE_STATUS.has(status)) replica.notBefore = this.now() + waitMs;
      if (status >= 500) judge(false);
      else if (status !== 429) judge(true);
      release();
      const { message, param } = engineErrorDetails(text, status);
      if (status === 401 || status === 403) throw upstreamUnauthorized(this.backend, replica.url, status, message);
      const error =
        status < 500
          ? new EngineError(status, message, { param, retryAfterMs: waitMs })
          : engineServerError(status, message, `replica ${replica.url} of backend ${this.backend.name} answered ${status}: ${message}`, waitMs);
      throw RETRYABLE_STATUS.has(status) ? new RetryableFailure(error) : error;
    }

    let first: Buffer | null;
    let bodyEnd: BodyEnd;
    try {
      ({ first, end: bodyEnd } = await firstChunk(body));
    } catch (error) {
      throw failure(error);
    }
    judge(true);
    clearTimeout(phaseTimer);
    lastChunkAt = performance.now();
    phaseTimer = first === null ? undefined : setTimeout(expire('idle'), timeouts.idleMs);

    const backendName = this.backend.name;
    const interrupted = (error: unknown): Error => {
      if (timedOut) {
        // An idle engine is a failure; the total timeout is a long answer (or a slow client), and
        // idle timeouts caused by a slow client are re-armed, never fired (see expire).
        if (timedOut === 'idle') replica.breaker.onFailure();
        return new StreamInterruptedError(
          `The engine sent nothing within the ${timedOut} timeout mid-response.`,
          `replica ${replica.url} of backend ${backendName} hit the ${timedOut} timeout mid-response`,
          { timeout: true, cause: error },
        );
      }
      if (signal?.aborted) return new RequestAbortedError();
      const reason = (error as Error).message;
      return new StreamInterruptedError(
        `The engine broke off mid-response: ${reason}`,
        `replica ${replica.url} of backend ${backendName} broke off mid-response: ${reason}`,
        { timeout: false, cause: error },
      );
    };
    let consumed = false;
    const consume = () => {
      if (consumed) throw new Error('the upstream body can be read only once');
      consumed = true;
    };
    const stream = body;
    async function* chunks(): AsyncGenerator<Buffer> {
      consume();
      let done = first === null;
      try {
        if (first === null) return;
        yield first;
        const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
        for (;;) {
          let next: IteratorResult<Buffer>;
          try {
            next = await iterator.next();
          } catch (error) {
            throw interrupted(error);
          }
          if (next.done) {
            done = true;
            return;
          }
          lastChunkAt = performance.now();
          yield next.value;
        }
      } finally {
        // A consumer that stops early (its client left) must not leave the engine generating.
        if (!done) controller.abort();
      }
    }

    /** The whole body, read by events: one promise, not one or two a chunk. */
    const readAll = (): Promise<Buffer> => {
      consume();
      if (first === null) return Promise.resolve(Buffer.alloc(0));
      if (bodyEnd.ended) return Promise.resolve(first);
      if (bodyEnd.error) return Promise.reject(interrupted(bodyEnd.error));
      const parts = [first];
      return new Promise((resolve, reject) => {
        stream.on('data', (chunk: Buffer) => {
          lastChunkAt = performance.now();
          parts.push(chunk);
        });
        stream.once('end', () => resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts)));
        stream.once('error', (error) => reject(interrupted(error)));
        stream.resume();
      });
    };
    return {
      status: response.statusCode,
      headers: response.headers,
      replica: replica.url,
      body: {
        [Symbol.asyncIterator]: chunks,
        readInto(sink: BodySink): BodyFlow {
          consume();
          let done = first === null;
          const flow: BodyFlow = {
            pause: () => stream.pause(),
            resume: () => stream.resume(),
            // A consumer that stops early (its client left) must not leave the engine generating.
            abort: () => {
              if (!done) controller.abort();
              done = true;
            },
          };
          if (first === null) {
            queueMicrotask(() => sink.end());
            return flow;
          }
          sink.data(first);
          if (bodyEnd.ended || bodyEnd.error) {
            const error = bodyEnd.error;
            done = true;
            queueMicrotask(() => (error ? sink.error(interrupted(error)) : sink.end()));
            return flow;
          }
          stream.on('data', (chunk: Buffer) => {
            lastChunkAt = performance.now();
            sink.data(chunk);
          });
          stream.once('end', () => {
            done = true;
            sink.end();
          });
          stream.once('error', (error) => {
            const wasDone = done;
            done = true;
            if (!wasDone) sink.error(interrupted(error));
          });
          // firstChunk left it paused, which a 'data' listener alone does not undo.
          stream.resume();
          return flow;
        },
      },
      bytes: readAll,
      discard: () => controller.abort(),
    };
  }

  private unreachable(replica: Replica, error: unknown): EngineFault {
    return new EngineFault(
      503,
      'upstream_unreachable',
      'The engine serving this model could not be reached; try again shortly.',
      `could not connect to replica ${replica.url} of backend ${this.backend.name}: ${(error as Error).message}`,
      { retryAfterMs: UNREACHABLE_RETRY_AFTER_MS },
    );
  }

  private timeout(replica: Replica, kind: TimeoutKind): EngineFault {
    const t = this.backend.timeouts;
    const ms = kind === 'total' ? t.totalMs : kind === 'idle' ? t.idleMs : t.firstByteMs;
    return new EngineFault(
      504,
      'upstream_timeout',
      `The engine sent nothing within the ${kind} timeout of ${ms} ms.`,
      `replica ${replica.url} of backend ${this.backend.name} sent nothing within the ${kind} timeout of ${ms} ms`,
    );
  }
}

/** What a client is told to wait after an engine could not be reached. */
const UNREACHABLE_RETRY_AFTER_MS = 1_000;

/**
 * An engine's own 5xx keeps its status where it means something to a client (vLLM answers 500 for an
 * internal error and 501 for a feature it does not implement; a load balancer's 502/503/504 are
 * what they say); anything else is a 502. The client reads the engine's message.
 */
function engineServerError(status: number, message: string, detail: string, retryAfterMs: number | undefined): EngineFault {
  const kept = status >= 500 && status <= 504 ? status : 502;
  const code = { 500: 'engine_error', 501: 'not_implemented', 502: 'upstream_error', 503: 'upstream_unavailable', 504: 'upstream_timeout' }[kept]!;
  return new EngineFault(kept, code, message, detail, { retryAfterMs: kept === 503 ? (retryAfterMs ?? UNREACHABLE_RETRY_AFTER_MS) : retryAfterMs });
}

/** How a body ended while nobody was reading it (a short body can end with its first chunk). */
interface BodyEnd {
  ended: boolean;
  error: Error | undefined;
}

/**
 * The body's first bytes, or null when it ended empty; the stream is left paused for whoever reads
 * the rest (by events or by iteration). `end` keeps track of an end or failure that comes meanwhile.
 */
function firstChunk(body: Readable): Promise<{ first: Buffer | null; end: BodyEnd }> {
  const end: BodyEnd = { ended: false, error: undefined };
  return new Promise((resolve, reject) => {
    let settled = false;
    const onData = (chunk: Buffer) => {
      body.pause();
      body.off('data', onData);
      settled = true;
      resolve({ first: chunk, end });
    };
    body.on('data', onData);
    body.once('end', () => {
      end.ended = true;
      if (!settled) resolve({ first: null, end });
    });
    body.once('error', (error) => {
      end.error = error;
      if (!settled) reject(error);
    });
  });
}

async function readCapped(body: Readable, limit: number): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    if (size < limit) parts.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(parts).toString('utf8').slice(0, limit);
}
