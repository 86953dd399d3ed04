import * as repo from '../repositories/threads.js';
import type { ThreadsQueryBody } from '../schemas/threads.js';
import type { TracingDeps } from './deps.js';

/** Threads (reference §2.9): one row per thread of turn calls, with turn counts, times and turn-duration percentiles. */

const num = (value: unknown): number | null => (value == null ? null : Number(value));

/**
 * The threads of a project as one batch for the JSON Lines sender. Threads are aggregates (one row per
 * thread, far fewer than calls), so they are read in one query.
 */
export async function* streamThreads(deps: TracingDeps, body: ThreadsQueryBody): AsyncGenerator<Record<string, unknown>[]> {
  const rows = await repo.listThreads(deps.db, {
    projectId: body.project_id,
    afterDatetime: body.filter?.after_datetime,
    beforeDatetime: body.filter?.before_datetime,
    threadIds: body.filter?.thread_ids,
    sortBy: body.sort_by,
    limit: body.limit,
    offset: body.offset,
  });
  yield rows.map((row) => ({
    thread_id: row.thread_id,
    turn_count: Number(row.turn_count),
    start_time: row.start_time,
    last_updated: row.last_updated,
    first_turn_id: row.first_turn_id,
    last_turn_id: row.last_turn_id,
    p50_turn_duration_ms: num(row.p50_turn_duration_ms),
    p99_turn_duration_ms: num(row.p99_turn_duration_ms),
  }));
}
