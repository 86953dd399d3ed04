import type { Readable } from 'node:stream';
import type { Principal, ProjectRef } from '../auth/principal.js';
import { requireProject } from '../auth/principal.js';
import { AppError, UnprocessableError, UpstreamError } from '../errors.js';
import { boundedInput } from '../http/validation.js';
import type { CancelSignal } from './proxy/cancel.js';
import { EngineError, RequestAbortedError } from './proxy/errors.js';
import type { UpstreamResponse } from './proxy/client.js';
import type { ModelRouter, Route } from './router.js';
import { modelRewriter, readUsage } from './rewrite.js';
import type { ChatCompletionRequest, Usage } from './schemas.js';
import { relayStream, type RelayOutcome } from './stream.js';
import type { UsageRecord } from './usage/repository.js';
import type { UsageWriter } from './usage/writer.js';
import type { UsageOutcome } from './tables.js';

export interface ChatCall {
  principal: Principal;
  body: ChatCompletionRequest;
  /** The request's id (x-request-id or generated). */
  requestId: string;
  /** `Compat-Project` or `OpenAI-Project`, as sent. */
  projectHeader: string | undefined;
  /** Fires when the client goes away; the upstream request is aborted with it. */
  signal: CancelSignal;
}

export type ChatResult =
  | { kind: 'json'; requestId: string; payload: string }
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

/**
 * Chat completions: resolve the model for the caller, shape the engine request (forced rollout
 * fields, usage for metering, the engine's names), send it through the backend's client, and answer
 * with the engine's body where only `model` is changed. Every request that is sent on to an engine is
 * metered, whatever its outcome; one refused before (a model it cannot route, a body it cannot accept,
 * such as a priority the model's backend cannot honour) is not, as no invalid input writes anything.
 */
export class ChatGateway {
  constructor(
    private readonly router: ModelRouter,
    private readonly usage: UsageWriter,
  ) {}

  /** The project usage is billed to: the header's (403 when the key cannot reach it), else `<entity>/inference`. */
  projectFor(principal: Principal, header: string | undefined): ProjectRef {
    if (header === undefined || header === '') return { entity: principal.entity, project: 'inference' };
    return requireProject(principal, header.trim(), 'Compat-Project');
  }

  async complete(call: ChatCall): Promise<ChatResult> {
    const startedAt = Date.now();
    const project = this.projectFor(call.principal, call.projectHeader);
    const body = call.body;
    if (body.model == null || body.model === '') {
      // The schema lets model be null (the engine's default model); a gateway in front of many needs a name.
      throw new UnprocessableError('Field required', ['body', 'model'], { type: 'missing', input: boundedInput(body) });
    }
    const modelId = body.model;
    const requestId = body.request_id ?? call.requestId;
    const meter = new Meter(this.usage, { call, project, modelId, requestId, startedAt });

    // A model that cannot be routed reached no engine and is not metered; nor is a refused priority below.
    const route = await this.router.resolve(call.principal, modelId);
    meter.route = route;
    if (body.priority !== undefined && body.priority !== 0 && !route.backend.backend.priorityScheduling) {
      // The engine would answer 400 (vLLM: "Priority scheduling is not enabled"); the seed makes it a validation error.
      throw new UnprocessableError(
        `Value error, priority ${body.priority} needs priority scheduling, which the backend serving ${modelId} does not use; send priority 0 or omit it`,
        ['body', 'priority'],
        { input: body.priority, ctx: { error: 'priority scheduling is not enabled' } },
      );
    }

    const clientWantsUsage = body.stream === true && body.stream_options?.include_usage === true;
    const upstreamBody = engineRequestBody(body, route, clientWantsUsage);
    let response: UpstreamResponse;
    try {
      response = await this.send(route, upstreamBody, requestId, call.signal, body.stream !== true);
    } catch (error) {
      meter.failed(error);
      throw closedOr(error, call.signal);
    }
    meter.firstByteAt = Date.now();

    if (body.stream === true) {
      const stream = relayStream(response.body, {
        model: modelId,
        clientWantsUsage,
        signal: call.signal,
        onEnd: (outcome) => meter.streamEnded(outcome),
      });
      return { kind: 'stream', requestId, payload: stream };
    }

    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      meter.failed(error);
      throw closedOr(error, call.signal);
    }
    if (!text.trimStart().startsWith('{')) {
      const error = new UpstreamError(`the engine's answer for ${modelId} was not a JSON object`);
      meter.failed(error);
      throw error;
    }
    meter.succeeded(readUsage(text), false);
    return { kind: 'json', requestId, payload: modelRewriter(modelId)(text) };
  }

  /**
   * Sends, and when an adapter the client believes loaded is unknown to the engine (it restarted, or
   * another gateway process unloaded it), forgets it and loads it again, once.
   */
  private async send(route: Route, body: string, requestId: string, signal: CancelSignal, wholeBody: boolean): Promise<UpstreamResponse> {
    const request = { path: '/v1/chat/completions', body, headers: { 'x-request-id': requestId }, signal, adapter: route.adapter, wholeBody };
    try {
      return await route.backend.send(request);
    } catch (error) {
      if (!(route.adapter && error instanceof EngineError && error.statusCode === 404)) throw error;
      for (const replica of route.backend.replicas) route.backend.adapters.forget(replica, route.adapter.name);
      return route.backend.send(request);
    }
  }
}

/** The body sent to the engine: the client's, with the engine's model name and what the gateway needs. */
export function engineRequestBody(body: ChatCompletionRequest, route: Route, clientWantsUsage: boolean): string {
  const out: Record<string, unknown> = { ...body, model: route.engineModel };
  if (out.engine_xargs !== undefined) {
    const xargs = out.engine_xargs;
    delete out.engine_xargs;
    if (xargs !== null) out[XARGS_FIELD] = { ...(out[XARGS_FIELD] as object | undefined), ...xargs };
  }
  if (route.trainable) {
    // The trainer needs each sampled token's id and logprob (`token_id:N` tokens).
    out.logprobs ??= true;
    out.return_tokens_as_token_ids ??= true;
  }
  if (body.stream === true) {
    // Always metered; per-chunk usage only when the client asked for usage, since it cannot be stripped without re-serialising.
    out.stream_options = clientWantsUsage
      ? { ...body.stream_options, include_usage: true }
      : { ...body.stream_options, include_usage: true, continuous_usage_stats: false };
  }
  return JSON.stringify(out);
}

function closedOr(error: unknown, signal: CancelSignal): unknown {
  return error instanceof RequestAbortedError || signal.aborted ? new ClientClosedError() : error;
}

/** Collects one request's usage and hands the row to the writer when the request is over. */
class Meter {
  route: Route | undefined;
  firstByteAt: number | undefined;
  private done = false;

  constructor(
    private readonly writer: UsageWriter,
    private readonly context: { call: ChatCall; project: ProjectRef; modelId: string; requestId: string; startedAt: number },
  ) {}

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
    const { call, project, modelId, requestId, startedAt } = this.context;
    const route = this.route;
    const row: UsageRecord = {
      created_at: new Date(startedAt),
      entity: project.entity,
      project: project.project,
      api_key_id: call.principal.keyId,
      request_id: requestId,
      model: modelId,
      base_model: route?.baseModel ?? null,
      trained_model: route?.trained?.name ?? null,
      checkpoint_step: route?.trained?.step ?? null,
      backend: route?.backend.backend.name ?? null,
      stream: call.body.stream === true,
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
  }
}
