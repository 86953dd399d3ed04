import { setTimeout as sleep } from 'node:timers/promises';
import Fastify from 'fastify';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createPgPool, postgresHandle } from '../../src/db/index.js';
import { sendJsonLines } from '../../src/tracing/http/jsonl.js';
import { readInBatches } from '../../src/tracing/services/batches.js';
import { onPostgresServer } from '../helpers/database.js';
import { adminPool, TEST_DATABASE_URL } from '../helpers/postgres.js';

/**
 * A stream's reader holds a connection (on PostgreSQL a cursor in its own transaction) until it stops:
 * whatever ends the stream, the reader is stopped and the connection goes back to the pool.
 */

describe('a JSON Lines stream whose client leaves', () => {
  it('stops the reader when the client leaves while the first batch is read', async () => {
    let returned = false;
    let firstAsked!: () => void;
    const asked = new Promise<void>((resolve) => (firstAsked = resolve));
    const batches: AsyncIterator<readonly unknown[]> = {
      async next() {
        firstAsked();
        await sleep(300);
        return { done: false, value: [{ row: 1 }] };
      },
      async return() {
        returned = true;
        return { done: true, value: undefined };
      },
    };
    const app = Fastify();
    app.get('/stream', (_request, reply) => sendJsonLines(reply, batches));
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const abort = new AbortController();
      const request = fetch(`${address}/stream`, { signal: abort.signal }).catch((error: Error) => error.name);
      await asked;
      abort.abort();
      expect(await request).toBe('AbortError');
      for (let i = 0; i < 50 && !returned; i++) await sleep(20);
      expect(returned).toBe(true);
    } finally {
      await app.close();
    }
  });
});

describe.runIf(onPostgresServer)('a cursor whose connection dies after its last batch', () => {
  it('fails the stream and leaves the pool its connection', async () => {
    // A pool of one: a connection the failed commit kept would leave no other to connect with.
    const handle = postgresHandle(createPgPool(TEST_DATABASE_URL!, 1, { connectMs: 2_000, statementMs: 0 }));
    const admin = adminPool();
    try {
      const reader = readInBatches<{ g: number }>(
        { db: handle.db, kind: 'postgres' },
        { query: sql<{ g: number }>`select g from generate_series(1, 3) g`, window: async () => [], size: 10 },
      );
      const first = await reader.next();
      expect(first.done ? [] : first.value.rows.map((r) => r.g)).toEqual([1, 2, 3]);
      const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(first.done ? handle.db : first.value.db);
      await admin.query('select pg_terminate_backend($1)', [rows[0].pid]);
      // The last batch was short: the reader ends by committing, on the connection that died.
      await expect(reader.next()).rejects.toThrow();
      const after = await sql<{ ok: number }>`select 1 as ok`.execute(handle.db);
      expect(after.rows).toEqual([{ ok: 1 }]);
    } finally {
      await admin.end();
      await handle.close();
    }
  });

  it('closes its pool even while a connection it lent is never given back (a stop would otherwise hang)', async () => {
    const handle = postgresHandle(createPgPool(TEST_DATABASE_URL!, 1, { connectMs: 2_000, statementMs: 0 }));
    const held = await handle.db.startTransaction().execute();
    await sql`select 1`.execute(held);
    // Resolves after CLOSE_WAIT_MS; without the bound, never.
    await handle.close();
    await held.rollback().execute();
  });
});
