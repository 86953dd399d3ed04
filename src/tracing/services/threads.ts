import * as repo from '../repositories/threads.js';
import type { ThreadsQueryBody } from '../schemas/threads.js';
import { readInBatches } from './batches.js';
import type { TracingDeps } from './deps.js';

/** Threads (reference §2.9): one row per thread of turn calls, with turn counts, times and turn-duration percentiles. */

const num = (value: unknown): number | null => (value == null ? null : Number(value));

/** Threads read per round trip: a cursor FETCH on PostgreSQL, a LIMIT/OFFSET window on PGlite. */
export const THREADS_BATCH_SIZE = 500;

/**
 * The threads of a project in batches for the JSON Lines sender, each read only when the client has
 * taken the previous one: through a cursor in its own transaction on PostgreSQL, in windows on PGlite
 * (whose one connection a slow reader must not hold).
 */
export async function* streamThreads(deps: TracingDeps, body: ThreadsQueryBody): AsyncGenerator<Record<string, unknown>[]> {
  const args: repo.ThreadsArgs = {
    projectId: body.project_id,
    afterDatetime: body.filter?.after_datetime,
    beforeDatetime: body.filter?.before_datetime,
    threadIds: body.filter?.thread_ids,
    sortBy: body.sort_by,
    limit: body.limit,
    offset: body.offset,
  };
  const batches = readInBatches(deps, {
    query: repo.threadsQuery(args), // validates the sort before anything is read
    window: (db, window) => repo.listThreads(db, { ...args, ...window }),
    limit: body.limit,
    offset: body.offset,
    size: THREADS_BATCH_SIZE,
  });
  for await (const { rows } of batches) if (rows.length > 0) yield rows.map(toThread);
}

function toThread(row: repo.ThreadRow): Record<string, unknown> {
  return {
    thread_id: row.thread_id,
    turn_count: Number(row.turn_count),
    start_time: row.start_time,
    last_updated: row.last_updated,
    first_turn_id: row.first_turn_id,
    last_turn_id: row.last_turn_id,
    p50_turn_duration_ms: num(row.p50_turn_duration_ms),
    p99_turn_duration_ms: num(row.p99_turn_duration_ms),
  };
}
