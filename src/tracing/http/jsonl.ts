import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { unmarkNumbers } from '../../http/exact-numbers.js';
import { holdsExactNumbers } from '../exact-numbers.js';
import { losslessJsonText } from '../json.js';

/**
 * Sends rows as JSON Lines (reference §1.1) as they come from `batches`: the first batch is read before
 * the headers go out, so a bad query still answers with a proper error status; later batches are read
 * only as the client takes the earlier ones (stream back-pressure). An empty result is an empty body.
 * `encoded`: the batches hold each row's JSON text already. A batch goes out in chunks of about
 * CHUNK_CHARS, never as one string: a batch of large rows could pass the longest string V8 holds.
 */
export async function sendJsonLines(
  reply: FastifyReply,
  batches: AsyncIterator<readonly unknown[]>,
  options: { lossless?: boolean; encoded?: boolean } = {},
): Promise<FastifyReply> {
  const encode = options.encoded ? (row: unknown) => row as string : options.lossless ? losslessJsonText : encodePlain;
  const first = await batches.next();
  async function* lines(): AsyncGenerator<string> {
    try {
      if (first.done) return;
      yield* chunks(first.value, encode);
      for (;;) {
        const next = await batches.next();
        if (next.done) return;
        yield* chunks(next.value, encode);
      }
    } finally {
      // Stops the reader (closes a cursor, ends its transaction) when the client goes away early.
      await batches.return?.();
    }
  }
  const body = Readable.from(lines(), { objectMode: false });
  // A client that left while the first batch was read gets a stream destroyed before it is read: lines()
  // never starts, so its finally never runs. Stop the reader here too (a second return is a no-op).
  body.once('close', () => void batches.return?.().catch(() => undefined));
  reply.type('application/jsonl');
  return reply.send(body);
}

/** Characters of JSON Lines sent as one chunk (a longer row is a chunk of its own). */
const CHUNK_CHARS = 1024 * 1024;

/** The rows as JSON Lines, in chunks of about CHUNK_CHARS. */
function* chunks(rows: readonly unknown[], encode: (row: unknown) => string): Generator<string> {
  let out = '';
  for (const row of rows) {
    const line = `${encode(row)}\n`;
    if (out.length > 0 && out.length + line.length > CHUNK_CHARS) {
      yield out;
      out = '';
    }
    out += line;
  }
  if (out.length > 0) yield out;
}

/** A row's JSON text; exact numbers read from call payloads (tracing/exact-numbers.ts) as their literals. */
function encodePlain(row: unknown): string {
  const text = JSON.stringify(row);
  return holdsExactNumbers(row) ? unmarkNumbers(text) : text;
}

/** Sends JSON text built by the caller as the answer, as it is. */
export function sendJsonText(reply: FastifyReply, text: string): FastifyReply {
  return reply.type('application/json; charset=utf-8').serializer((payload) => payload as string).send(text);
}

/**
 * Sends a JSON body that may hold LosslessNumbers (stored object values, table rows): their number text
 * goes out as stored, so `1.0` and integers beyond 2^53 read back as sent.
 */
export function sendLosslessJson(reply: FastifyReply, body: unknown): FastifyReply {
  return reply.type('application/json; charset=utf-8').serializer((payload) => payload as string).send(losslessJsonText(body));
}
