import type { IncomingHttpHeaders } from 'node:http';
import { util } from 'undici';
import type { BackendConfig } from '../backends/config.js';
import type { BodyFlow, BodySink, BodySource } from '../stream.js';
import { AdapterLoader, raceAbort, withCheckpointName, type AdapterLoadRecord, type AdapterSpec } from './adapters.js';
import { sleep, type CancelSignal } from './cancel.js';
import { DEFAULT_BREAKER, type BreakerOptions } from './breaker.js';
import {
  EngineError,
  engineErrorDetails,
  EngineFault,
  failureCode,
  RequestAbortedError,
  StreamInterruptedError,
  UNREACHABLE_RETRY_AFTER_MS,
  upstreamUnauthorized,
  upstreamUnreachable,
} from './errors.js';
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
  /**
   * A LoRA adapter to load on the chosen replica before sending. When the engine answers 404 (it lost
   * the adapter: a restart), the adapter is loaded there again and the request resent, once.
   */
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
  /** Hears of every adapter load, successful or not (logging and metrics). */
  onAdapterLoad?: (record: AdapterLoadRecord) => void;
  /** Hears which adapters a replica's /v1/models listed (discovery), so that those of deleted checkpoints can be unloaded. */
  onAdaptersListed?: (client: BackendClient, replica: Replica, names: readonly string[]) => void;
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
    const { onAdapterLoad, onAdaptersListed } = options;
    this.adapters = new AdapterLoader(backend, this.baseHeaders, backend.timeouts.adapterLoadMs, {
      observe: onAdapterLoad,
      listed: onAdaptersListed && ((replica, names) => onAdaptersListed(this, replica, names)),
    });
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
    const { adapter } = request;
    if (!adapter) return this.exchange(replica, request, deadline);
    const load = this.adapters.ensureLoaded(replica, adapter);
    await this.waitForLoad(replica, load, request.signal);
    try {
      return await this.exchange(replica, request, deadline);
    } catch (error) {
      if (!(error instanceof EngineError && error.statusCode === 404)) throw namingCheckpoint(error, adapter.name);
      // The engine no longer has the adapter (it restarted, or another process unloaded it): load it
      // again on this replica and send once more. Only the load this request waited on is forgotten, so
      // the requests that met the same restart share one reload instead of each dropping the last one.
      // The reload first looks whether the checkpoint still exists (AdapterSpec.exists): another process
      // that deleted it unloads it too, and its adapter must not come back.
      this.adapters.forget(replica, adapter.name, load);
      await this.waitForLoad(replica, this.adapters.ensureLoaded(replica, adapter), request.signal);
      try {
        return await this.exchange(replica, request, deadline);
      } catch (again) {
        throw namingCheckpoint(again, adapter.name);
      }
    }
  }

  /** Waits for an adapter's load on the replica; the caller's abort stops only its own wait. */
  private async waitForLoad(replica: Replica, load: Promise<void>, signal: CancelSignal | undefined): Promise<void> {
    try {
      await (signal ? raceAbort(load, signal) : load);
    } catch (error) {
      if (!isConnectError(error)) throw error;
      replica.breaker.onFailure();
      throw new RetryableFailure(this.unreachable(replica, error));
    }
  }

  /** One request to one replica. */
  private exchange(replica: Replica, request: UpstreamRequest, deadline: number): Promise<UpstreamResponse> {
    return new Promise((resolve, reject) => {
      const exchange = new Exchange(this, replica, request, Math.max(0, deadline - this.now()), resolve, reject);
      try {
        replica.pool.dispatch(
          {
            method: request.method ?? 'POST',
            path: replica.basePath + request.path,
            headers: request.body === undefined
              ? { ...this.baseHeaders, ...request.headers }
              : { 'content-type': 'application/json', ...this.baseHeaders, ...request.headers },
            body: request.body,
          },
          exchange,
        );
      } catch (error) {
        reject(exchange.fail(error));
      }
    });
  }

  /** @internal The error for an engine answer of 400 or more, its body read (capped). */
  engineAnswerError(replica: Replica, status: number, headers: IncomingHttpHeaders, text: string): Error | RetryableFailure {
    const waitMs = retryAfterMs(headers, this.now());
    if (waitMs !== undefined && RETRYABLE_STATUS.has(status)) replica.notBefore = this.now() + waitMs;
    const { message, param } = engineErrorDetails(text, status);
    if (status === 401 || status === 403) return upstreamUnauthorized(this.backend, replica.url, status, message);
    const error =
      status < 500
        ? new EngineError(status, message, { param, retryAfterMs: waitMs })
        : engineServerError(status, message, `replica ${replica.url} of backend ${this.backend.name} answered ${status}: ${message}`, waitMs);
    return RETRYABLE_STATUS.has(status) ? new RetryableFailure(error) : error;
  }

  /** @internal A failure before the first byte of a 2xx body (Exchange.fail has judged the replica). */
  beforeFirstByte(replica: Replica, error: unknown, timedOut: TimeoutKind | undefined, clientLeft: boolean): Error | RetryableFailure {
    if (timedOut) return this.timeout(replica, timedOut);
    if (clientLeft) return new RequestAbortedError();
    if (isConnectError(error)) return new RetryableFailure(this.unreachable(replica, error));
    const reason = (error as Error).message;
    return new EngineFault(502, 'upstream_error', `The engine failed before answering: ${failureCode(error)}`, `replica ${replica.url} of backend ${this.backend.name} failed: ${reason}`, { cause: error });
  }

  /** @internal A failure after the first byte, as the body's reader is told it. */
  midResponse(replica: Replica, error: unknown, timedOut: TimeoutKind | undefined, clientLeft: boolean): Error {
    if (timedOut) {
      return new StreamInterruptedError(
        `The engine sent nothing within the ${timedOut} timeout mid-response.`,
        `replica ${replica.url} of backend ${this.backend.name} hit the ${timedOut} timeout mid-response`,
        { timeout: true, cause: error },
      );
    }
    if (clientLeft) return new RequestAbortedError();
    const reason = (error as Error).message;
    return new StreamInterruptedError(
      `The engine broke off mid-response: ${failureCode(error)}`,
      `replica ${replica.url} of backend ${this.backend.name} broke off mid-response: ${reason}`,
      { timeout: false, cause: error },
    );
  }

  private unreachable(replica: Replica, error: unknown): EngineFault {
    return upstreamUnreachable(`could not connect to replica ${replica.url} of backend ${this.backend.name}: ${(error as Error).message}`);
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

/** A body's chunks that may wait for their reader before undici is asked to stop reading the socket. */
const UNREAD_LIMIT = 64 * 1024;

/**
 * One request to an engine and its answer, as undici's dispatch handler: the body's chunks go
 * straight to whoever reads them (BodySource), with no stream object in between. A stream's answer
 * comes as about one chunk a token, so a Readable's buffering and events per chunk showed in
 * profiles. The exchange is also the response: `resolve` gets it when the first byte of a 2xx body
 * has arrived (or the 2xx body ended empty), and `reject` the reason for a failure before that.
 */
class Exchange implements BodySource, UpstreamResponse {
  private abortUpstream: ((error: Error) => void) | undefined;
  private abortReason: Error | undefined;
  private resumeUpstream: (() => void) | undefined;
  status = 0;
  private rawHeaders: Buffer[] = [];
  /** After the first byte of a 2xx body (or its empty end): the response has been handed out. */
  private answered = false;
  /** An error answer's body, read up to ERROR_BODY_LIMIT. */
  private errorParts: Buffer[] | undefined;
  private errorSize = 0;
  /** Chunks that arrived before the body's reader came. */
  private unread: Buffer[] = [];
  private unreadSize = 0;
  private sink: BodySink | undefined;
  /** The reader asked for no more for now (its client is slow). */
  private paused = false;
  private ended = false;
  private failure: unknown;
  private consumed = false;
  /** The reader has what it will get: an end, an error, or it stopped reading. */
  private done = false;
  private timedOut: TimeoutKind | undefined;
  private readonly totalTimer: NodeJS.Timeout;
  private phaseTimer: NodeJS.Timeout | undefined;
  /** When the last chunk arrived (performance.now()): a chunk records it, and the idle timer reads it when it fires. */
  private lastChunkAt = 0;
  private released = false;
  private judged = false;

  constructor(
    private readonly client: BackendClient,
    private readonly target: Replica,
    private readonly request: UpstreamRequest,
    totalMs: number,
    private readonly resolve: (response: UpstreamResponse) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    const timeouts = client.backend.timeouts;
    this.totalTimer = setTimeout(this.expire, totalMs, 'total');
    // A non-streaming completion sends nothing until it is done, so only the total timeout bounds it.
    this.phaseTimer = request.wholeBody ? undefined : setTimeout(this.expire, timeouts.firstByteMs, 'first byte');
    request.signal?.addEventListener('abort', this.onClientAbort, { once: true });
    target.outstanding++;
    target.breaker.onSend();
    if (request.signal?.aborted) this.onClientAbort();
  }

  // undici's dispatch handler.

  onConnect(abort: (error: Error) => void): void {
    this.abortUpstream = abort;
    if (this.abortReason) abort(this.abortReason);
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void): boolean {
    this.status = status;
    this.rawHeaders = rawHeaders;
    this.resumeUpstream = resume;
    if (status >= 400) this.errorParts = [];
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.errorParts) {
      if (this.errorSize < ERROR_BODY_LIMIT) this.errorParts.push(chunk);
      this.errorSize += chunk.length;
      return true;
    }
    this.lastChunkAt = performance.now();
    if (this.sink) {
      if (!this.done) this.sink.data(chunk);
      return !this.paused;
    }
    // No reader yet (there is none before the first byte hands the response out).
    this.unread.push(chunk);
    this.unreadSize += chunk.length;
    if (!this.answered) this.firstByte();
    return this.unreadSize < UNREAD_LIMIT;
  }

  onComplete(): void {
    if (this.errorParts) {
      const status = this.status;
      if (status >= 500) this.judge(false);
      else if (status !== 429) this.judge(true);
      this.release();
      const text = Buffer.concat(this.errorParts).toString('utf8').slice(0, ERROR_BODY_LIMIT);
      this.reject(this.client.engineAnswerError(this.target, status, this.headers, text));
      return;
    }
    this.ended = true;
    // An empty body: the answer is complete without a first byte.
    if (!this.answered) this.firstByte();
    this.release();
    if (this.sink && !this.done) {
      this.done = true;
      this.sink.end();
    }
  }

  onError(error: Error): void {
    if (!this.answered) {
      this.reject(this.fail(error));
      return;
    }
    if (this.timedOut === 'idle') this.target.breaker.onFailure();
    this.failure = error;
    this.release();
    if (this.sink && !this.done) {
      this.done = true;
      this.sink.error(this.client.midResponse(this.target, error, this.timedOut, this.request.signal?.aborted === true));
    }
  }

  // The body, for the gateway.

  readInto(sink: BodySink): BodyFlow {
    this.consume();
    const flow: BodyFlow = {
      pause: () => {
        this.paused = true;
      },
      resume: () => {
        this.paused = false;
        this.resumeUpstream?.();
      },
      // A reader that stops early (its client left) must not leave the engine generating.
      abort: () => this.discard(),
    };
    const unread = this.unread;
    this.unread = [];
    this.unreadSize = 0;
    for (const chunk of unread) sink.data(chunk);
    if (this.ended || this.failure !== undefined) {
      this.done = true;
      const failure = this.failure;
      queueMicrotask(() =>
        failure === undefined ? sink.end() : sink.error(this.client.midResponse(this.target, failure, this.timedOut, this.request.signal?.aborted === true)),
      );
      return flow;
    }
    this.sink = sink;
    // Reading may have stopped while the chunks waited for a reader.
    this.resumeUpstream?.();
    return flow;
  }

  /** The whole body, in one promise. */
  bytes(): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const parts: Buffer[] = [];
      this.readInto({
        data: (chunk) => parts.push(chunk),
        end: () => resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts)),
        error: reject,
      });
    });
  }

  /** The body by iteration: for readers that await between chunks (a stream kept alive). */
  async *chunks(): AsyncGenerator<Buffer> {
    const queue: Buffer[] = [];
    let finished = false;
    let failure: unknown;
    let wake: (() => void) | undefined;
    const flow = this.readInto({
      data: (chunk) => {
        queue.push(chunk);
        wake?.();
      },
      end: () => {
        finished = true;
        wake?.();
      },
      error: (error) => {
        failure = error;
        finished = true;
        wake?.();
      },
    });
    let completed = false;
    try {
      for (;;) {
        const chunk = queue.shift();
        if (chunk) {
          // Read on only once this chunk has been taken (the reader's pace, as with a stream).
          flow.pause();
          yield chunk;
          if (queue.length === 0) flow.resume();
          continue;
        }
        if (finished) {
          completed = true;
          if (failure !== undefined) throw failure;
          return;
        }
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      if (!completed) flow.abort();
    }
  }

  // Timers and aborts.

  private readonly expire = (kind: TimeoutKind): void => {
    if (kind === 'idle') {
      // The reader asked for a pause, or chunks wait for it: the wait is the client's (backpressure),
      // not the engine's, so the idle timer starts again.
      if (this.paused || this.unreadSize > 0) {
        this.phaseTimer?.refresh();
        return;
      }
      // A chunk came since the timer was set: wait out the rest of the idle time after it. (Cheaper
      // than moving the timer on every chunk, of which a stream has about one a token.)
      const idleMs = this.client.backend.timeouts.idleMs;
      const quiet = performance.now() - this.lastChunkAt;
      if (quiet < idleMs) {
        this.phaseTimer = setTimeout(this.expire, Math.ceil(idleMs - quiet), 'idle');
        return;
      }
    }
    this.timedOut = kind;
    this.abort(new RequestAbortedError());
  };

  private readonly onClientAbort = (): void => this.abort(new RequestAbortedError());

  private abort(reason: Error): void {
    if (this.abortUpstream) this.abortUpstream(reason);
    else this.abortReason ??= reason;
  }

  private consume(): void {
    if (this.consumed) throw new Error('the upstream body can be read only once');
    this.consumed = true;
  }

  /** The first byte of a 2xx body arrived (or the body ended empty): hand out the response (this exchange). */
  private firstByte(): void {
    this.answered = true;
    this.judge(true);
    clearTimeout(this.phaseTimer);
    this.phaseTimer = this.ended ? undefined : setTimeout(this.expire, this.client.backend.timeouts.idleMs, 'idle');
    this.resolve(this);
  }

  /**
   * The error for a failure before the first byte. Only the engine's faults count against its
   * breaker: connect and socket errors and first-byte or idle timeouts. The total timeout bounds a
   * long generation (or a slow client), and an error building the request is the gateway's own.
   */
  fail(error: unknown): Error | RetryableFailure {
    this.release();
    const timedOut = this.timedOut;
    if (timedOut) {
      if (timedOut !== 'total') this.judge(false);
    } else if (!this.request.signal?.aborted && (isConnectError(error) || isUpstreamFault(error))) {
      this.judge(false);
    }
    return this.client.beforeFirstByte(this.target, error, timedOut, this.request.signal?.aborted === true);
  }

  get headers(): IncomingHttpHeaders {
    return util.parseHeaders(this.rawHeaders) as IncomingHttpHeaders;
  }

  /** The replica that answered. */
  get replica(): string {
    return this.target.url;
  }

  get body(): this {
    return this;
  }

  [Symbol.asyncIterator](): AsyncGenerator<Buffer> {
    return this.chunks();
  }

  /** Aborts the upstream request when the body is not wanted (or no longer: its reader stopped). */
  discard(): void {
    this.done = true;
    if (!this.ended && this.failure === undefined) this.abort(new RequestAbortedError());
  }

  private judge(ok: boolean): void {
    this.judged = true;
    if (ok) this.target.breaker.onSuccess();
    else this.target.breaker.onFailure();
  }

  private release(): void {
    if (this.released) return;
    this.released = true;
    clearTimeout(this.totalTimer);
    clearTimeout(this.phaseTimer);
    this.request.signal?.removeEventListener('abort', this.onClientAbort);
    this.target.outstanding--;
    if (!this.judged) this.target.breaker.onAbandon();
  }
}

/** An engine error with the checkpoint's name where the engine wrote the adapter's. */
function namingCheckpoint(error: unknown, adapterName: string): unknown {
  if (error instanceof EngineError) error.message = withCheckpointName(error.message, adapterName);
  return error;
}
