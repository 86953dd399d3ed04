import { Readable } from 'node:stream';
import type { Principal, ProjectRef } from '../auth/principal.js';
import { requireProject } from '../auth/principal.js';
import { AppError, UnprocessableError, UpstreamError } from '../errors.js';
import { headerSafeRequestId } from '../http/request-id.js';
import { boundedInput } from '../http/validation.js';
import type { CancelSignal } from './proxy/cancel.js';
import { RequestAbortedError, RetiredAdapterError } from './proxy/errors.js';
import type { UpstreamResponse } from './proxy/client.js';
import type { ModelRouter, Route } from './router.js';
import { modelRewriter, readUsage } from './rewrite.js';
import { stringifyExact } from './exact-json.js';
import type { Logger } from './logger.js';
import type { CompletionRequest, EngineRequestBody, Usage } from './schemas.js';
import { errorEvent, relayEvents, relayStream, type RelayOutcome } from './stream.js';
import type { UsageRecord } from './usage/repository.js';
import type { UsageWriter } from './usage/writer.js';
import type { UsageOutcome } from './tables.js';

/** The engine routes the gateway serves, by the path it sends them to. */
export type Endpoint = 'chat' | 'completions' | 'tokenize' | 'detokenize';

const ENGINE_PATHS: Record<Endpoint, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  tokenize: '/tokenize',
  detokenize: '/detokenize',
};

export interface EngineCall {
  endpoint: Endpoint;
  principal: Principal;
  body: EngineRequestBody;
  /**
   * The body's JSON text, when the body is exactly what it says (a common shape the fast path
   * validated, nothing coerced or held): the engine is sent this text when it needs no change.
   */
  bodyText?: string;
  /** The X-Request-Id header as sent: it wins over a body `request_id`, as in vLLM. */
  headerRequestId: string | undefined;
  /** The id when neither the header nor the body gives one. */
  generatedRequestId: string;
  /** The project header as sent: `Compat-Project`, else `OpenAI-Project` (its name, for a refusal to name it). */
  projectHeader: { name: 'Compat-Project' | 'OpenAI-Project'; value: string } | undefined;
  /** Fires when the client goes away; the upstream request is aborted with it. */
  signal: CancelSignal;
}

export type ChatResult =
  | { kind: 'json'; requestId: string; payload: Buffer }
  /** Server-sent events; the usage record is written when the stream ends. */
  | { kind: 'stream'; requestId: string; payload: Readable };

/** 499 as nginx logs it: nothing is sent, since nobody is left to read it. */
export class ClientClosedError extends AppError {
  readonly statusCode = 499;
  readonly code = 'client_closed_request';
  constructor() {
    super('The client closed the connection before the response was ready.');
  }
}

/** The engines' extension field for engine_xargs; the only kind so far speaks vLLM's dialect. */
const XARGS_FIELD = 'vllm_xargs';
const KEEP_ALIVE = ': keep-alive\n\n';

export interface GatewayOptions {
  /** While a stream waits for its first token, an SSE comment is sent this often (0: never). */
  keepAliveMs?: number;
  log?: Logger;
}

/**
 * Chat and text completions, tokenize and detokenize: resolve the model for the caller, shape the
 * engine request (forced rollout fields, usage for metering, the engine's names), send it through the
 * backend's client, and answer with the engine's body where only `model` is changed. Every completion
 * that is sent on to an engine is metered exactly once, whatever its outcome, shutdown included; one
 * refused before (a model it cannot route, a body it cannot accept, such as a priority the model's
 * backend cannot honour) is not, as no invalid input writes anything. Tokenize and detokenize
 * generate nothing and are not metered.
 */
export class ChatGateway {
  private readonly keepAliveMs: number;
  private readonly log: Logger | undefined;
  /** Meters of requests sent on and not yet written, for shutdown to wait on. */
  private readonly open = new Set<Meter>();
  private drainWaiters: (() => void)[] = [];

  constructor(
    private readonly router: ModelRouter,
    private readonly usage: UsageWriter,
    options: GatewayOptions = {},
  ) {
    this.keepAliveMs = options.keepAliveMs ?? 0;
    this.log = options.log;
  }

  /** The project usage is billed to: the header's (403 when the key cannot reach it), else `<entity>/inference`. */
  projectFor(principal: Principal, header: EngineCall['projectHeader']): ProjectRef {
    if (header === undefined || header.value === '') return { entity: principal.entity, project: 'inference' };
    return requireProject(principal, header.value.trim(), header.name);
  }

  /**
   * Resolves when every request sent on so far has written its usage row (streams cut at shutdown
   * included), or after `timeoutMs`.
   */
  drained(timeoutMs: number): Promise<void> {
    if (this.open.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      timer.unref();
      this.drainWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  async complete(call: EngineCall): Promise<ChatResult> {
    const startedAt = Date.now();
    const project = this.projectFor(call.principal, call.projectHeader);
    const body = call.body;
    if (body.model == null || body.model === '') {
      // The schema lets model be null (the engine's default model); a gateway in front of many needs a name.
      throw new UnprocessableError('Field required', ['body', 'model'], { type: 'missing', input: boundedInput(body) });
    }
    const modelId = body.model;
    const bodyId = 'request_id' in body && typeof body.request_id === 'string' && body.request_id !== '' ? body.request_id : undefined;
    const requestId = headerSafeRequestId(call.headerRequestId || bodyId || call.generatedRequestId);

    // A model that cannot be routed reached no engine and is not metered; nor is a refused priority below.
    let route = await this.router.resolve(call.principal, modelId);
    // Only generation is scheduled: vLLM's /tokenize and /detokenize ignore a priority, and so does the gateway.
    const priority = (call.endpoint === 'chat' || call.endpoint === 'completions') && 'priority' in body ? body.priority : undefined;
    if (priority !== undefined && priority !== 0 && !route.backend.backend.priorityScheduling) {
      // The engine would answer 400 (vLLM: "Priority scheduling is not enabled"); the seed makes it a validation error.
      throw new UnprocessableError(
        `Value error, priority ${priority} needs priority scheduling, which the backend serving ${modelId} does not use; send priority 0 or omit it`,
        ['body', 'priority'],
        { input: priority, ctx: { error: 'priority scheduling is not enabled' } },
      );
    }

    const generates = call.endpoint === 'chat' || call.endpoint === 'completions';
    const streaming = generates && (body as CompletionRequest).stream === true;
    const streamOptions = streaming ? (body as CompletionRequest).stream_options : undefined;
    const clientWantsUsage = streaming && streamOptions?.include_usage === true;
    const meter = generates ? this.meter({ call, project, modelId, requestId, startedAt, route, stream: streaming }) : undefined;

    // An adapter the engine lost (it restarted) is loaded again on that replica by the client, once.
    const send = (via: Route) =>
      via.backend.send({
        path: ENGINE_PATHS[call.endpoint],
        body:
          (call.bodyText !== undefined ? engineRequestText(call.bodyText, body, via, streaming) : undefined) ??
          engineRequestBody(body, via, clientWantsUsage, call.endpoint),
        headers: { 'x-request-id': requestId },
        signal: call.signal,
        adapter: via.adapter,
        wholeBody: !streaming,
      });
    const rerouted = async (error: unknown, attempts: number): Promise<UpstreamResponse> => {
      // The latest checkpoint was deleted after this request was routed to it (retention keeps the ones
      // that landed since): the model still has a latest one, so the request goes to that, as it would
      // had it come a moment later. A request for a step names that step, and its deletion is a 404.
      if (!(error instanceof RetiredAdapterError) || !route.trained?.latest || attempts === 0) throw error;
      const next = await this.router.resolve(call.principal, modelId);
      if (next.adapter?.name === route.adapter?.name) throw error;
      route = next;
      meter?.reroute(next);
      return send(next).catch((again: unknown) => rerouted(again, attempts - 1));
    };
    const sending = send(route).catch((error: unknown) => rerouted(error, MAX_REROUTES));
    if (streaming && this.keepAliveMs > 0) {
      const first = await raceTimer(sending, this.keepAliveMs);
      if (first === TIMED_OUT) {
        // The engine has not sent its first token yet: answer 200 now and keep the connection alive.
        return { kind: 'stream', requestId, payload: Readable.from(this.afterKeepAlive(sending, { meter: meter!, modelId, adapterName: () => route.adapter?.name, clientWantsUsage, signal: call.signal })) };
      }
    }
    let response: UpstreamResponse;
    try {
      response = await sending;
    } catch (error) {
      meter?.failed(error);
      throw closedOr(error, call.signal);
    }
    if (meter) meter.firstByteAt = Date.now();

    if (streaming) {
      const stream = relayStream(response.body, this.relayOptions(meter!, modelId, route.adapter?.name, clientWantsUsage, call.signal));
      return { kind: 'stream', requestId, payload: stream };
    }

    let bytes: Buffer;
    try {
      bytes = await response.bytes();
    } catch (error) {
      meter?.failed(error);
      throw closedOr(error, call.signal);
    }
    // One character per byte: the JSON's structure is ASCII, so usage and model are found (and the
    // model replaced) without decoding the body, and an unchanged body goes back as the same bytes.
    const text = bytes.toString('latin1');
    if (!text.trimStart().startsWith('{')) {
      const error = new UpstreamError(`the engine's answer for ${modelId} was not a JSON object`);
      meter?.failed(error);
      throw error;
    }
    meter?.succeeded(readUsage(text), false);
    if (!generates) return { kind: 'json', requestId, payload: bytes };
    const rewritten = modelRewriter(modelId, 'latin1')(text);
    return { kind: 'json', requestId, payload: rewritten === text ? bytes : Buffer.from(rewritten, 'latin1') };
  }

  private meter(context: MeterContext): Meter {
    const meter = new Meter(this.usage, context, () => {
      this.open.delete(meter);
      if (this.open.size === 0) {
        const waiters = this.drainWaiters;
        this.drainWaiters = [];
        for (const wake of waiters) wake();
      }
    });
    this.open.add(meter);
    return meter;
  }

  private relayOptions(meter: Meter, modelId: string, adapterName: string | undefined, clientWantsUsage: boolean, signal: CancelSignal) {
    return {
      model: modelId,
      adapterName,
      clientWantsUsage,
      signal,
      onEnd: (outcome: RelayOutcome) => meter.streamEnded(outcome),
      onFault: (error: unknown) => this.log?.warn({ err: error }, 'an engine stream failed mid-response'),
    };
  }

  /** SSE comments until the engine answers, then its stream; a failure meanwhile is told as an error event. */
  private async *afterKeepAlive(
    sending: Promise<UpstreamResponse>,
    args: { meter: Meter; modelId: string; adapterName: () => string | undefined; clientWantsUsage: boolean; signal: CancelSignal },
  ): AsyncGenerator<Buffer | string> {
    let relayed = false;
    try {
      yield KEEP_ALIVE;
      for (;;) {
        const next = await raceTimer(sending, this.keepAliveMs);
        if (next === TIMED_OUT) {
          yield KEEP_ALIVE;
          continue;
        }
        break;
      }
      let response: UpstreamResponse;
      try {
        response = await sending;
      } catch (error) {
        args.meter.failed(error);
        if (error instanceof RequestAbortedError || args.signal.aborted) return;
        this.log?.warn({ err: error }, 'an engine request failed while its stream was kept alive');
        yield errorEvent(error) + 'data: [DONE]\n\n';
        return;
      }
      args.meter.firstByteAt = Date.now();
      relayed = true;
      yield* relayEvents(response.body, this.relayOptions(args.meter, args.modelId, args.adapterName(), args.clientWantsUsage, args.signal));
    } finally {
      if (!relayed) {
        // The client left while waiting: nothing will read the answer.
        sending.then((response) => response.discard(), () => undefined);
        args.meter.failed(new RequestAbortedError());
      }
    }
  }

}

const TIMED_OUT = Symbol('timed out');
/** How many times a request for a latest checkpoint follows it past a deletion (each one a newer checkpoint). */
const MAX_REROUTES = 3;

/** The promise's settlement, or TIMED_OUT after `ms` (a rejection is left for the caller to await). */
function raceTimer<T>(promise: Promise<T>, ms: number): Promise<typeof TIMED_OUT | 'settled'> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(TIMED_OUT), ms);
    const settle = () => {
      clearTimeout(timer);
      resolve('settled');
    };
    promise.then(settle, settle);
  });
}

/** The body sent to the engine: the client's, with the engine's model name and what the gateway needs. */
export function engineRequestBody(body: EngineRequestBody, route: Route, clientWantsUsage: boolean, endpoint: Endpoint = 'chat'): string {
  const out: Record<string, unknown> = { ...body, model: route.engineModel };
  if (out.engine_xargs !== undefined) {
    const xargs = out.engine_xargs;
    delete out.engine_xargs;
    if (xargs !== null) out[XARGS_FIELD] = { ...(out[XARGS_FIELD] as object | undefined), ...xargs };
  }
  if (route.trainable && endpoint === 'chat') {
    // The trainer needs each sampled token's id and logprob (`token_id:N` tokens).
    out.logprobs ??= true;
    out.return_tokens_as_token_ids ??= true;
  }
  if (route.trainable && endpoint === 'completions') {
    // Completions give logprobs as a count of alternatives: 0 is the sampled token's alone.
    out.logprobs ??= 0;
    out.return_tokens_as_token_ids ??= true;
  }
  if ((endpoint === 'chat' || endpoint === 'completions') && out.stream === true) {
    const options = out.stream_options as object | null | undefined;
    // Always metered; per-chunk usage only when the client asked for usage, since it cannot be stripped without re-serialising.
    out.stream_options = clientWantsUsage
      ? { ...options, include_usage: true }
      : { ...options, include_usage: true, continuous_usage_stats: false };
  }
  return stringifyExact(out);
}

/** Usage for metering on a stream whose client asked for no stream_options (engineRequestBody's form). */
const METERED_STREAM = '"stream_options":{"include_usage":true,"continuous_usage_stats":false}';

/**
 * The client's own text as the engine body, where engineRequestBody would change nothing in its
 * meaning: the engine's model name is the client's, no engine_xargs to rename, no rollout fields for
 * a trainable model; a stream without stream_options gets them added at the end, as
 * engineRequestBody adds them. Undefined otherwise.
 */
export function engineRequestText(text: string, body: EngineRequestBody, route: Route, streaming: boolean): string | undefined {
  if (route.engineModel !== body.model || route.trainable || 'engine_xargs' in body) return undefined;
  if (!streaming) return text;
  if ('stream_options' in body) return undefined;
  // A validated body is an object with a model: its text ends with `}` after whitespace, and is not `{}`.
  const end = text.trimEnd();
  return `${end.slice(0, -1)},${METERED_STREAM}}`;
}

function closedOr(error: unknown, signal: CancelSignal): unknown {
  return error instanceof RequestAbortedError || signal.aborted ? new ClientClosedError() : error;
}

interface MeterContext {
  call: EngineCall;
  project: ProjectRef;
  modelId: string;
  requestId: string;
  startedAt: number;
  route: Route;
  stream: boolean;
}

/** Collects one request's usage and hands the row to the writer when the request is over. */
class Meter {
  firstByteAt: number | undefined;
  private done = false;

  constructor(
    private readonly writer: UsageWriter,
    private context: MeterContext,
    private readonly onWritten: () => void,
  ) {}

  /** The request went to another checkpoint (the one it was routed to was deleted): its row names that one. */
  reroute(route: Route): void {
    this.context = { ...this.context, route };
  }

  succeeded(usage: Usage | undefined, estimated: boolean, completionEstimate = 0): void {
    this.write('success', 200, null, usage, estimated, completionEstimate);
  }

  failed(error: unknown): void {
    if (error instanceof RequestAbortedError || this.context.call.signal.aborted) {
      this.write('client_disconnected', 499, 'client_closed_request', undefined, false);
      return;
    }
    const status = error instanceof AppError ? error.statusCode : 500;
    const code = error instanceof AppError ? error.code : 'internal_error';
    this.write('error', status, code, undefined, false);
  }

  streamEnded(outcome: RelayOutcome): void {
    // A stream cut short has no usage chunk: count the content chunks relayed so far, marked as an estimate.
    const estimated = outcome.usage === undefined;
    if (outcome.disconnected) {
      this.write('client_disconnected', 499, 'client_closed_request', outcome.usage, estimated, outcome.contentChunks);
    } else if (outcome.error) {
      this.write('error', outcome.error.status, outcome.error.code, outcome.usage, estimated, outcome.contentChunks);
    } else {
      this.succeeded(outcome.usage, estimated, outcome.contentChunks);
    }
  }

  private write(
    outcome: UsageOutcome,
    status: number,
    errorCode: string | null,
    usage: Usage | undefined,
    estimated: boolean,
    completionEstimate = 0,
  ): void {
    if (this.done) return;
    this.done = true;
    const { call, project, modelId, requestId, startedAt, route, stream } = this.context;
    const row: UsageRecord = {
      created_at: new Date(startedAt),
      entity: project.entity,
      project: project.project,
      api_key_id: call.principal.keyId,
      request_id: requestId,
      model: modelId,
      base_model: route.baseModel,
      trained_model: route.trained?.name ?? null,
      checkpoint_step: route.trained?.step ?? null,
      backend: route.backend.backend.name,
      stream,
      prompt_tokens: usage?.prompt_tokens ?? 0,
      completion_tokens: usage?.completion_tokens ?? (estimated ? completionEstimate : 0),
      cached_tokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
      estimated: usage === undefined && estimated,
      latency_ms: Date.now() - startedAt,
      time_to_first_token_ms: this.firstByteAt === undefined ? null : this.firstByteAt - startedAt,
      outcome,
      status,
      error_code: errorCode,
    };
    this.writer.record(row);
    this.onWritten();
  }
}
