import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { unmarkNumbers } from '../../http/exact-numbers.js';
import { holdsExactNumbers } from '../exact-numbers.js';
import { losslessJsonText } from '../json.js';

/**
 * Sends rows as JSON Lines (reference §1.1) as they come from `batches`: the first batch is read before
 * the headers go out, so a bad query still answers with a proper error status; later batches are read
 * only as the client takes the earlier ones (stream back-pressure). An empty result is an empty body.
 */
export async function sendJsonLines(
  reply: FastifyReply,
  batches: AsyncIterator<readonly unknown[]>,
  options: { lossless?: boolean } = {},
): Promise<FastifyReply> {
  const encode = options.lossless ? encodeLossless : encodePlain;
  const first = await batches.next();
  async function* lines(): AsyncGenerator<string> {
    try {
      if (first.done) return;
      if (first.value.length) yield encode(first.value);
      for (;;) {
        const next = await batches.next();
        if (next.done) return;
        if (next.value.length) yield encode(next.value);
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

/**
 * Rows as JSON Lines; exact numbers read from call payloads (tracing/exact-numbers.ts) as their literals.
 * Only a row marked as holding them is searched for their marks.
 */
function encodePlain(rows: readonly unknown[]): string {
  let out = '';
  for (const row of rows) {
    const text = JSON.stringify(row);
    out += `${holdsExactNumbers(row) ? unmarkNumbers(text) : text}\n`;
  }
  return out;
}

/** For stored digested values (table rows), which may hold LosslessNumbers. */
function encodeLossless(rows: readonly unknown[]): string {
  let out = '';
  for (const row of rows) out += `${losslessJsonText(row)}\n`;
  return out;
}

/**
 * Sends a JSON body that may hold LosslessNumbers (stored object values, table rows): their number text
 * goes out as stored, so `1.0` and integers beyond 2^53 read back as sent.
 */
export function sendLosslessJson(reply: FastifyReply, body: unknown): FastifyReply {
  return reply.type('application/json; charset=utf-8').serializer((payload) => payload as string).send(losslessJsonText(body));
}
