/**
 * An incremental reader of server-sent events, for tests that read a stream's raw chunks: the gateway's
 * completion streams, the training API's job event streams (the gateway's own reader is EventFilter in
 * src/inference/stream.ts). Events may be split across chunks and chunks may hold many.
 */
export interface SseEvent {
  /** The `event:` field; vLLM sends none, some engines send `error`. */
  event: string | undefined;
  /** The `data:` lines joined by newlines, e.g. a JSON chunk or `[DONE]`. */
  data: string;
  /** The `id:` field, when the event has one (a reconnecting client sends the last as Last-Event-ID). */
  id?: string;
  /** The `retry:` field (milliseconds before a reconnect), when the block has one. */
  retry?: number;
}

export class SseParser {
  private readonly decoder = new TextDecoder();
  private pending = '';

  /** Feeds one chunk and returns the events it completed. */
  push(chunk: Uint8Array): SseEvent[] {
    this.pending += this.decoder.decode(chunk, { stream: true });
    // A trailing '\r' may be the first half of a '\r\n' split across chunks: leave it for the next one.
    if (this.pending.includes('\r')) this.pending = this.pending.replace(/\r\n|\r(?!$)/g, '\n');
    const events: SseEvent[] = [];
    let end: number;
    while ((end = this.pending.indexOf('\n\n')) !== -1) {
      const block = this.pending.slice(0, end);
      this.pending = this.pending.slice(end + 2);
      const event = parseBlock(block);
      if (event) events.push(event);
    }
    return events;
  }
}

function parseBlock(block: string): SseEvent | null {
  let event: string | undefined;
  let id: string | undefined;
  let retry: number | undefined;
  const data: string[] = [];
  for (const line of block.split('\n')) {
    // Lines starting with ':' are comments (keep-alives).
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
    else if (field === 'id') id = value;
    else if (field === 'retry') retry = Number(value);
  }
  if (data.length === 0 && event === undefined && id === undefined && retry === undefined) return null;
  return { event, data: data.join('\n'), ...(id === undefined ? {} : { id }), ...(retry === undefined ? {} : { retry }) };
}
