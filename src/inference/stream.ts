import { Readable, type Writable } from 'node:stream';
import { AppError } from '../errors.js';
import { openAiType } from '../http/error-handler.js';
import { withCheckpointName } from './proxy/adapters.js';
import type { CancelSignal } from './proxy/cancel.js';
import { ENGINE_CODES, RequestAbortedError } from './proxy/errors.js';
import { topLevelModelValue } from './rewrite.js';
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
  /** The engine's name of the checkpoint's adapter, replaced by the checkpoint's own in error messages. */
  adapterName?: string;
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
const DONE_BYTES = Buffer.from(DONE);

/** Where an upstream body's chunks go, as they arrive (see BodySource). */
export interface BodySink {
  data(chunk: Buffer): void;
  end(): void;
  error(error: unknown): void;
}

/** Control over an upstream body being read into a sink. */
export interface BodyFlow {
  pause(): void;
  resume(): void;
  /** Stops reading and aborts the upstream request (the client left). */
  abort(): void;
}

/**
 * An upstream body read by events rather than promises: the engine client's bodies are (a stream's
 * chunks arrive one per engine write, about one per token, so a promise or two per chunk showed in
 * profiles). Chunks reach `sink.data` in order, then one `end` or `error`.
 */
export interface BodySource {
  readInto(sink: BodySink): BodyFlow;
}

/**
 * The relayed stream. Everything a chunk needs is done synchronously as it arrives; the output of the
 * chunks that arrive together (one socket read of the engine's answer) goes out as one write.
 */
export function relayStream(upstream: BodySource, options: RelayOptions): Readable {
  return new Relay(upstream, options);
}

/** The relayed events, for a stream that has already started (keep-alives sent) and reads by promises. */
export async function* relayEvents(upstream: AsyncIterable<Buffer>, options: RelayOptions): AsyncGenerator<Buffer> {
  const filter = new EventFilter(options);
  let ended = false;
  try {
    for await (const chunk of upstream) {
      const out = filter.take(chunk);
      if (out) yield out;
    }
    ended = true;
    const last = filter.finish();
    if (last) yield last;
  } catch (error) {
    ended = true;
    const out = filter.fail(error);
    if (out) yield out;
  } finally {
    // Not ended: the consumer stopped reading (the client left) and the generator was returned early.
    if (!ended) filter.outcome.disconnected = true;
    options.onEnd(filter.outcome);
  }
}

class Relay extends Readable {
  private readonly events: EventFilter;
  private readonly flow: BodyFlow;
  private queued: Buffer[] = [];
  private flushScheduled = false;
  private paused = false;
  private finished = false;
  /** Where the relay is piped (the client's response), corked at the end: see close. */
  private destination: NodeJS.WritableStream | undefined;

  constructor(
    source: BodySource,
    private readonly options: RelayOptions,
  ) {
    super();
    this.events = new EventFilter(options);
    this.flow = source.readInto({
      data: (chunk) => {
        if (this.finished) return;
        const out = this.events.take(chunk);
        if (!out) return;
        this.queued.push(out);
        if (!this.flushScheduled) {
          this.flushScheduled = true;
          queueMicrotask(this.flush);
        }
      },
      end: () => this.close(this.events.finish()),
      error: (error) => this.close(this.events.fail(error)),
    });
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    this.destination = destination;
    return super.pipe(destination, options);
  }

  override _read(): void {
    if (this.paused) {
      this.paused = false;
      this.flow.resume();
    }
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.finished) {
      // The client went away before the end: stop the engine generating for nobody.
      this.finished = true;
      this.events.outcome.disconnected = true;
      this.flow.abort();
      this.options.onEnd(this.events.outcome);
    }
    callback(error);
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.queued.length === 0 || this.destroyed) return;
    const out = this.queued.length === 1 ? this.queued[0]! : Buffer.concat(this.queued);
    this.queued = [];
    if (!this.push(out) && !this.paused && !this.finished) {
      this.paused = true;
      this.flow.pause();
    }
  };

  private close(last: Buffer | undefined): void {
    if (this.finished) return;
    this.finished = true;
    // The last bytes and the response's end (for HTTP, the chunked terminator) leave in one write
    // rather than two: corked here, the destination is fully uncorked by its end(), which the pipe
    // calls once this stream has ended. Should the pipe wait for a drain instead (a slow client),
    // the uncork below lets the buffered bytes go.
    const destination = this.destination as Writable | undefined;
    if (destination && typeof destination.cork === 'function' && !destination.writableEnded) {
      destination.cork();
      setImmediate(() => destination.writableCorked > 0 && destination.uncork());
    }
    this.flush();
    if (last && !this.destroyed) this.push(last);
    this.push(null);
    this.options.onEnd(this.events.outcome);
  }
}

/**
 * The per-event work of a relay, synchronous and chunk by chunk. Text is handled as latin1, one
 * character per byte: offsets are byte offsets, no UTF-8 decoding is needed to find event bounds or
 * the model field, a multi-byte character split across chunks needs no care, and unchanged events
 * go back to the same bytes. Only the rare events that are parsed (usage, errors) are decoded.
 */
class EventFilter {
  readonly outcome: RelayOutcome = { usage: undefined, contentChunks: 0, disconnected: false, error: undefined };
  private readonly rewrite: StreamModelRewriter | undefined;
  private pending = '';
  private sawDone = false;
  private chunks = 0;

  constructor(private readonly options: RelayOptions) {
    this.rewrite = options.model === undefined ? undefined : new StreamModelRewriter(options.model);
  }

  /** What to send for this chunk (its own bytes when nothing in it changes), or undefined for nothing yet. */
  take(chunk: Buffer): Buffer | undefined {
    const whole = this.pending === '';
    if (whole && this.rewrite?.known) {
      const fast = this.takeKnownEvents(chunk, this.rewrite.known);
      if (fast !== undefined) return fast;
    }
    let text = whole ? chunk.toString('latin1') : this.pending + chunk.toString('latin1');
    // A lone '\r' at the end may be half of a '\r\n' split across chunks.
    const crlf = text.includes('\r');
    if (crlf) text = text.replace(/\r\n|\r(?!$)/g, '\n');
    const cut = text.lastIndexOf('\n\n');
    if (cut === -1) {
      this.pending = text;
      return undefined;
    }
    const complete = cut + 2 === text.length ? text : text.slice(0, cut + 2);
    this.pending = cut + 2 === text.length ? '' : text.slice(cut + 2);
    const filtered = this.filter(complete);
    if (filtered === null) return whole && !crlf && complete.length === chunk.length ? chunk : Buffer.from(complete, 'latin1');
    return filtered === '' ? undefined : Buffer.from(filtered, 'latin1');
  }

  /**
   * The common case, on bytes: a chunk of whole events, each an ordinary completion chunk that starts
   * with the text already seen up to its model value. Each event then needs one comparison, and the
   * chunk goes out as it came (or with the client's prefix in place of the engine's). Undefined for
   * any other chunk (usage, errors, [DONE], CRLF, a split event), which takes the general path.
   */
  private takeKnownEvents(chunk: Buffer, known: KnownPrefix): Buffer | undefined {
    const length = chunk.length;
    if (length < 2 || chunk[length - 1] !== LF || chunk[length - 2] !== LF) return undefined;
    if (chunk.indexOf(CR) !== -1 || hasUsageKey(chunk)) return undefined;
    const prefix = known.engine;
    const ends: number[] = [];
    for (let start = 0; start < length; ) {
      if (start + prefix.length > length || chunk.compare(prefix, 0, prefix.length, start, start + prefix.length) !== 0) return undefined;
      // A completion chunk is one `data:` line: its first newline must end the event (found, as the chunk ends with one).
      const newline = chunk.indexOf(LF, start + prefix.length);
      if (chunk[newline + 1] !== LF) return undefined;
      start = newline + 2;
      ends.push(start);
    }
    const events = ends.length;
    // Every chunk but the role chunk carries about one token (vLLM's default stream interval).
    this.outcome.contentChunks += this.chunks === 0 ? events - 1 : events;
    this.chunks += events;
    if (known.client === undefined) return chunk;
    const parts: Buffer[] = [];
    let start = 0;
    for (const end of ends) {
      parts.push(known.client, chunk.subarray(start + prefix.length, end));
      start = end;
    }
    return Buffer.concat(parts);
  }

  /** The end of the engine's stream: what was left over, and [DONE] if the engine sent none. */
  finish(): Buffer | undefined {
    let out = '';
    if (this.pending.trim() !== '') {
      const last = `${this.pending}\n\n`;
      out = this.filter(last) ?? last;
    }
    this.pending = '';
    if (out === '') return this.sawDone ? undefined : DONE_BYTES;
    return Buffer.from(this.sawDone ? out : out + DONE, 'latin1');
  }

  /** A failure after the first byte, told as an error event and [DONE]; nothing when the client left. */
  fail(error: unknown): Buffer | undefined {
    if (error instanceof RequestAbortedError || this.options.signal.aborted) {
      this.outcome.disconnected = true;
      return undefined;
    }
    this.options.onFault?.(error);
    // Headers went out long ago: the failure can only be told in the stream, as vLLM does it.
    const status = error instanceof AppError ? error.statusCode : 502;
    const code = error instanceof AppError ? error.code : 'upstream_error';
    this.outcome.error = { status, code };
    return Buffer.from(`${errorEvent(error)}${DONE}`);
  }

  /** The events of `text` (whole events only) as they should reach the client; null when unchanged. */
  private filter(text: string): string | null {
    let out: string | null = null;
    let start = 0;
    let end: number;
    while ((end = text.indexOf('\n\n', start)) !== -1) {
      const event = text.slice(start, end + 2);
      const kept = this.inspect(event);
      if (out !== null) out += kept;
      else if (kept !== event) out = text.slice(0, start) + kept;
      start = end + 2;
    }
    return out;
  }

  private inspect(event: string): string {
    if (event.startsWith(DONE)) {
      this.sawDone = true;
      return event;
    }
    if (event.startsWith('data: {"error"')) {
      const { text, status, code } = engineErrorEvent(parseData(event), this.options.adapterName);
      this.outcome.error = { status, code };
      return Buffer.from(text).toString('latin1');
    }
    if (event.includes('"usage":{')) {
      const parsed = parseData(event) as { usage?: Usage | null; choices?: unknown[] } | undefined;
      if (parsed?.usage) {
        this.outcome.usage = parsed.usage;
        if (Array.isArray(parsed.choices) && parsed.choices.length === 0) {
          if (!this.options.clientWantsUsage) return '';
          return this.rewrite ? this.rewrite.apply(event) : event;
        }
      }
    }
    // Every chunk but the role chunk carries about one token (vLLM's default stream interval).
    if (this.chunks++ > 0) this.outcome.contentChunks++;
    return this.rewrite ? this.rewrite.apply(event) : event;
  }
}

const LF = 0x0a;
const CR = 0x0d;

/**
 * Whether `"usage":{` occurs in the bytes, as the general path's `includes` would find it: by its
 * 'u's, a byte search each, since a search for the whole key costs ten times one for a byte.
 */
function hasUsageKey(chunk: Buffer): boolean {
  for (let u = chunk.indexOf(0x75); u !== -1; u = chunk.indexOf(0x75, u + 1)) {
    if (
      chunk[u - 1] === 0x22 && chunk[u + 1] === 0x73 && chunk[u + 2] === 0x61 && chunk[u + 3] === 0x67 &&
      chunk[u + 4] === 0x65 && chunk[u + 5] === 0x22 && chunk[u + 6] === 0x3a && chunk[u + 7] === 0x7b
    ) {
      return true;
    }
  }
  return false;
}

/** An event's text up to the end of its model value as the engine wrote it, and with the client's id (undefined when equal). */
interface KnownPrefix {
  engine: Buffer;
  client: Buffer | undefined;
}

/**
 * The model rewrite for a stream's events (latin1 text). An engine starts every chunk of one stream
 * with the same text up to and including `"model":"..."` (id, object, created, model), so once one
 * event's top-level model value has been found, an event that starts with that same text has its
 * model at the same place: a prefix comparison instead of a scan.
 */
class StreamModelRewriter {
  /** Set from the first event whose model value is a string. */
  known: KnownPrefix | undefined;
  private readonly replacement: string;
  private enginePrefix: string | undefined;
  private clientPrefix = '';

  constructor(to: string) {
    this.replacement = Buffer.from(JSON.stringify(to)).toString('latin1');
  }

  apply(event: string): string {
    const enginePrefix = this.enginePrefix;
    if (enginePrefix !== undefined && event.startsWith(enginePrefix)) {
      return this.clientPrefix === enginePrefix ? event : this.clientPrefix + event.slice(enginePrefix.length);
    }
    const span = topLevelModelValue(event);
    if (!span) return event;
    const [start, end] = span;
    const edited = event.slice(0, start) + this.replacement;
    // Only a string value ends where its closing quote is; a number or null could go on in a longer event.
    if (event.charCodeAt(start) === 0x22) {
      this.enginePrefix = event.slice(0, end);
      this.clientPrefix = edited;
      this.known = {
        engine: Buffer.from(this.enginePrefix, 'latin1'),
        client: edited === this.enginePrefix ? undefined : Buffer.from(edited, 'latin1'),
      };
    }
    return edited + event.slice(end);
  }
}

/** A failure told inside a stream, in the OpenAI envelope (the message never names engines). */
export function errorEvent(error: unknown): string {
  const status = error instanceof AppError ? error.statusCode : 502;
  const code = error instanceof AppError ? error.code : 'upstream_error';
  const message = error instanceof Error ? error.message : String(error);
  const param = error instanceof AppError ? error.param : null;
  return `data: ${JSON.stringify({ error: { message, type: openAiType(status), param, code } })}\n\n`;
}

/**
 * An engine's in-stream error event in the OpenAI envelope with a string code, as the gateway's own
 * are: vLLM writes its exception name as `type` and the HTTP status as an integer `code`.
 */
function engineErrorEvent(parsed: unknown, adapterName: string | undefined): { text: string; status: number; code: string } {
  const error = (parsed as { error?: unknown } | undefined)?.error;
  const inner = typeof error === 'object' && error !== null ? (error as Record<string, unknown>) : {};
  const numeric = typeof inner.code === 'number' ? inner.code : Number.NaN;
  const status = numeric >= 400 && numeric < 500 ? numeric : 502;
  const code = typeof inner.code === 'string' ? inner.code : status < 500 ? (ENGINE_CODES[status] ?? 'invalid_request') : 'upstream_error';
  const said = typeof inner.message === 'string' ? inner.message : typeof error === 'string' ? error : 'The engine failed while generating the response.';
  const message = adapterName === undefined ? said : withCheckpointName(said, adapterName);
  const envelope = {
    error: { message, type: openAiType(status), param: typeof inner.param === 'string' ? inner.param : null, code },
  };
  return { text: `data: ${JSON.stringify(envelope)}\n\n`, status, code };
}

/** The JSON of an event's data lines; `event` is latin1 text of UTF-8 bytes. */
function parseData(event: string): unknown {
  // The usual event: one `data: ` line.
  const newline = event.indexOf('\n');
  if (event.startsWith('data: ') && newline === event.length - 2) {
    try {
      return JSON.parse(Buffer.from(event.slice(6, newline), 'latin1').toString('utf8'));
    } catch {
      return undefined;
    }
  }
  const lines = Buffer.from(event, 'latin1').toString('utf8').split('\n').filter((line) => line.startsWith('data:'));
  const data = lines.map((line) => line.slice(line.startsWith('data: ') ? 6 : 5)).join('\n');
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}
