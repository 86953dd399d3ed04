import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../../db/index.js';
import type { TracingDeps } from './deps.js';

export interface BatchPlan<Row, Key = never> {
  /** The whole query, with the request's own limit and offset. */
  query: RawBuilder<Row>;
  /**
   * The same query cut to one window (PGlite): `limit` rows from `offset` on, counted after the rows up to
   * `after` when it is given (see `key`).
   */
  window(db: Kysely<Database>, window: { limit: number; offset: number; after?: Key }): Promise<Row[]>;
  /**
   * A row's place in the order, for the next window to start after it instead of counting OFFSET rows from
   * the start: without it, the windows of a long result read the whole result before each one.
   */
  key?(row: Row): Key;
  /** The request's limit and offset, to plan the windows. */
  limit?: number | null;
  offset?: number | null;
  /**
   * Rows per batch, or a function asked before each batch is read (after the consumer has taken the one
   * before), so that a reader can size batches by what the earlier ones held.
   */
  size: number | (() => number);
}

/**
 * Rows of a query in batches, each read only when the consumer asks for the next: through a
 * server-side cursor in its own transaction on PostgreSQL, and in windows on PGlite, whose single
 * connection a slow reader must not hold: each window after the last row of the one before (`key`),
 * or by LIMIT/OFFSET. Each batch comes with the executor that holds
 * the cursor, so that lookups made per batch use that connection rather than wait on the pool for a
 * second one (N streams would otherwise deadlock a pool of N).
 */
export async function* readInBatches<Row, Key = never>(deps: TracingDeps, plan: BatchPlan<Row, Key>): AsyncGenerator<{ rows: Row[]; db: Kysely<Database> }> {
  const { size } = plan;
  const nextSize = typeof size === 'number' ? () => size : () => Math.max(1, Math.floor(size()));
  if (deps.kind === 'postgres') {
    const trx = await deps.db.startTransaction().execute();
    let done = false;
    try {
      await sql`declare batch_cursor no scroll cursor for ${plan.query}`.execute(trx);
      for (;;) {
        const count = nextSize();
        const { rows } = await sql<Row>`fetch forward ${sql.raw(String(count))} from batch_cursor`.execute(trx);
        yield { rows, db: trx };
        if (rows.length < count) break;
      }
      done = true;
    } finally {
      if (!done) await trx.rollback().execute();
      else {
        try {
          await trx.commit().execute();
        } catch (error) {
          // kysely releases the connection on a commit only when it succeeds; a rollback releases it either
          // way (a dead connection leaves the pool), so a failed commit cannot hold a pool slot for good.
          await trx.rollback().execute().catch(() => undefined);
          throw error;
        }
      }
    }
    return;
  }
  const start = plan.offset ?? 0;
  const end = plan.limit == null ? Infinity : start + plan.limit;
  let after: Key | undefined;
  for (let offset = start; offset < end; ) {
    const limit = Math.min(nextSize(), end - offset);
    const rows = await plan.window(deps.db, after === undefined ? { limit, offset } : { limit, offset: 0, after });
    yield { rows, db: deps.db };
    if (rows.length < limit) return;
    offset += limit;
    if (plan.key) after = plan.key(rows[rows.length - 1]);
  }
}
