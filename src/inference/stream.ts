import { Readable } from 'node:stream';
import { AppError } from '../errors.js';
import type { CancelSignal } from './proxy/cancel.js';
import { ENGINE_CODES, RequestAbortedError } from './proxy/errors.js';
import { modelRewriter } from './rewrite.js';
import type { Usage } from './schemas.js';

/**
 * Relays an engine's SSE stream to the client. Chunks go out as they arrive, untouched where
 * possible: an upstream chunk that holds whole events and needs no change is passed on as the same
 * bytes. Events are never re-serialised; the only edits are textual (the `model` value), and the
 * usage-only chunk is dropped when the client did not ask for it (the gateway always asks the engine
 * for usage, to meter it).
 */

export interface RelayOptions {
  /** The id the client sent, written as every chunk's `model` whatever the engine wrote there. */
  model?: string;
  /** The client's own `stream_options.include_usage`. */
  clientWantsUsage: boolean;
  signal: CancelSignal;
  onEnd(outcome: RelayOutcome): void;
  /** A failure after the first byte, told to the client as an error event; the gateway logs it. */
  onFault?(error: unknown): void;
}

export interface RelayOutcome {
  /** The engine's usage chunk (or the last cumulative usage), when one arrived. */
  usage: Usage | undefined;
  /** Completion chunks relayed, an estimate of the tokens streamed when usage never came. */
  contentChunks: number;
  /** The client went away before the end. */
  disconnected: boolean;
  /** Why the stream failed, for the engine's in-stream error events and upstream failures. */
  error: { status: number; code: string } | undefined;
}

const DONE = 'data: [DONE]\n\n';

export function relayStream(upstream: AsyncIterable<Buffer>, options: RelayOptions): Readable {
  const state = { started: false };
  const readable = Readable.from(relay(upstream, options, state), { objectMode: false });
  // A client gone before the first read destroys the stream before the generator ever runs.
  readable.once('close', () => {
    if (!state.started) options.onEnd({ usage: undefined, contentChunks: 0, disconnected: true, error: undefined });
  });
  return readable;
}

/** The relayed events; used directly by a stream that has already started (keep-alives sent). */
export function relayEvents(upstream: AsyncIterable<Buffer>, options: RelayOptions): AsyncGenerator<Buffer | string> {
  return relay(upstream, options, { started: false });
}

async function* relay(upstream: AsyncIterable<Buffer>, options: RelayOptions, state: { started: boolean }): AsyncGenerator<Buffer | string> {
  state.started = true;
  const outcome: RelayOutcome = { usage: undefined, contentChunks: 0, disconnected: false, error: undefined };
  const decoder = new TextDecoder();
  const rewrite = options.model === undefined ? undefined : modelRewriter(options.model);
  let pending = '';
  let sawDone = false;
  let chunks = 0;
  let ended = false;

  /** The events of `text` (whole events only) as they should reach the client; null when unchanged. */
  const filter = (text: string): string | null => {
    let out: string | null = null;
    let start = 0;
    let end: number;
    while ((end = text.indexOf('\n\n', start)) !== -1) {
      const event = text.slice(start, end + 2);
      const kept = inspect(event);
      if (out !== null) out += kept;
      else if (kept !== event) out = text.slice(0, start) + kept;
      start = end + 2;
    }
    return out;
  };

  const inspect = (event: string): string => {
    if (event.startsWith(DONE)) {
      sawDone = true;
      return event;
    }
    if (event.startsWith('data: {"error"')) {
      const { text, status, code } = engineErrorEvent(parseData(event));
      outcome.error = { status, code };
      return text;
    }
    if (event.includes('"usage":{')) {
      const parsed = parseData(event) as { usage?: Usage | null; choices?: unknown[] } | undefined;
      if (parsed?.usage) {
        outcome.usage = parsed.usage;
        if (Array.isArray(parsed.choices) && parsed.choices.length === 0) {
          if (!options.clientWantsUsage) return '';
          return rewrite ? rewrite(event) : event;
        }
      }
    }
    // Every chunk but the role chunk carries about one token (vLLM's default stream interval).
    if (chunks++ > 0) outcome.contentChunks++;
    return rewrite ? rewrite(event) : event;
  };

  try {
    for await (const chunk of upstream) {
      const whole = pending === '';
      pending += decoder.decode(chunk, { stream: true });
      // A lone '\r' at the end may be half of a '\r\n' split across chunks.
      if (pending.includes('\r')) pending = pending.replace(/\r\n|\r(?!$)/g, '\n');
      const cut = pending.lastIndexOf('\n\n');
      if (cut === -1) continue;
      const complete = pending.slice(0, cut + 2);
      // The chunk held exactly these events: send its own bytes. (Equal lengths mean pure ASCII; the
      // decoder holds no bytes back here, since an event starts with an ASCII field name.)
      const exact = whole && cut + 2 === pending.length && complete.length === chunk.length;
      pending = pending.slice(cut + 2);
      const filtered = filter(complete);
      if (filtered === null) yield exact ? chunk : complete;
      else if (filtered !== '') yield filtered;
    }
    if (pending.trim() !== '') {
      const last = filter(`${pending}\n\n`);
      yield last ?? `${pending}\n\n`;
    }
    if (!sawDone) yield DONE;
    ended = true;
  } catch (error) {
    ended = true;
    if (error instanceof RequestAbortedError || options.signal.aborted) {
      outcome.disconnected = true;
      return;
    }
    options.onFault?.(error);
    // Headers went out long ago: the failure can only be told in the stream, as vLLM does it.
    const status = error instanceof AppError ? error.statusCode : 502;
    const code = error instanceof AppError ? error.code : 'upstream_error';
    outcome.error = { status, code };
    yield `${errorEvent(error)}${DONE}`;
  } finally {
    // Not ended: the consumer stopped reading (the client left) and the generator was returned early.
    if (!ended) outcome.disconnected = true;
    options.onEnd(outcome);
  }
}

/** A failure told inside a stream, in the OpenAI envelope (the message never names engines). */
export function errorEvent(error: unknown): string {
  const status = error instanceof AppError ? error.statusCode : 502;
  const code = error instanceof AppError ? error.code : 'upstream_error';
  const message = error instanceof Error ? error.message : String(error);
  const param = error instanceof AppError ? error.param : null;
  return `data: ${JSON.stringify({ error: { message, type: status < 500 ? 'invalid_request_error' : 'server_error', param, code } })}\n\n`;
}

/**
 * An engine's in-stream error event in the OpenAI envelope with a string code, as the gateway's own
 * are: vLLM writes its exception name as `type` and the HTTP status as an integer `code`.
 */
function engineErrorEvent(parsed: unknown): { text: string; status: number; code: string } {
  const error = (parsed as { error?: unknown } | undefined)?.error;
  const inner = typeof error === 'object' && error !== null ? (error as Record<string, unknown>) : {};
  const numeric = typeof inner.code === 'number' ? inner.code : Number.NaN;
  const status = numeric >= 400 && numeric < 500 ? numeric : 502;
  const code = typeof inner.code === 'string' ? inner.code : status < 500 ? (ENGINE_CODES[status] ?? 'invalid_request') : 'upstream_error';
  const message =
    typeof inner.message === 'string' ? inner.message : typeof error === 'string' ? error : 'The engine failed while generating the response.';
  const envelope = {
    error: { message, type: status < 500 ? 'invalid_request_error' : 'server_error', param: typeof inner.param === 'string' ? inner.param : null, code },
  };
  return { text: `data: ${JSON.stringify(envelope)}\n\n`, status, code };
}

function parseData(event: string): unknown {
  const lines = event.split('\n').filter((line) => line.startsWith('data:'));
  const data = lines.map((line) => line.slice(line.startsWith('data: ') ? 6 : 5)).join('\n');
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}
