import { sql, type RawBuilder } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import type { SortBy } from '../query/schema.js';
import { byteOrder } from '../query/values.js';
import { isoText, type Executor } from './common.js';

/**
 * Threads aggregated from turn calls (reference §2.9, threads_query_builder.py): non-deleted calls with
 * a non-empty thread_id whose id is their turn_id. A turn still running counts towards turn_count and
 * start_time; it updates `last_updated` with its start and has no duration.
 */

export const THREAD_SORT_FIELDS = ['thread_id', 'turn_count', 'start_time', 'last_updated', 'p50_turn_duration_ms', 'p99_turn_duration_ms'] as const;

export interface ThreadsArgs {
  projectId: string;
  afterDatetime?: string | null;
  beforeDatetime?: string | null;
  threadIds?: readonly string[] | null;
  sortBy?: readonly SortBy[] | null;
  limit?: number | null;
  offset?: number | null;
}

export interface ThreadRow {
  thread_id: string;
  turn_count: unknown;
  start_time: string;
  last_updated: string;
  first_turn_id: string | null;
  last_turn_id: string | null;
  p50_turn_duration_ms: unknown;
  p99_turn_duration_ms: unknown;
}

function orderBy(sortBy: readonly SortBy[] | null | undefined): RawBuilder<unknown> {
  const items = sortBy?.length ? sortBy : [{ field: 'last_updated', direction: 'desc' }];
  const keys = items.map(({ field, direction }) => {
    if (!(THREAD_SORT_FIELDS as readonly string[]).includes(field)) {
      throw new InvalidRequestError(`Invalid sort field ${JSON.stringify(field)} for threads: expected one of ${THREAD_SORT_FIELDS.join(', ')}`, { code: 'invalid_sort' });
    }
    if (direction !== 'asc' && direction !== 'desc') {
      throw new InvalidRequestError(`Invalid sort direction ${JSON.stringify(direction)}: expected asc or desc`, { code: 'invalid_sort' });
    }
    const key = field === 'thread_id' ? byteOrder(sql.ref(field)) : sql.ref(field);
    return sql`${key} ${sql.raw(direction)} nulls last`;
  });
  keys.push(sql`${byteOrder(sql.ref('thread_id'))} asc`);
  return sql.join(keys);
}

export function threadsQuery(args: ThreadsArgs): RawBuilder<ThreadRow> {
  const turnFilters = [
    sql`project_id = ${args.projectId}`,
    sql`thread_id is not null and thread_id <> ''`,
    sql`turn_id = id`,
    sql`started_at is not null`,
    sql`deleted_at is null`,
  ];
  if (args.threadIds?.length) turnFilters.push(sql`thread_id in (${sql.join([...args.threadIds])})`);
  const having: RawBuilder<unknown>[] = [];
  if (args.afterDatetime) having.push(sql`start_time > ${args.afterDatetime}::timestamptz`);
  if (args.beforeDatetime) having.push(sql`last_updated < ${args.beforeDatetime}::timestamptz`);
  return sql<ThreadRow>`
    with turns as (
      select thread_id, id, started_at, coalesce(ended_at, started_at) as updated_at,
        case when ended_at is not null then extract(epoch from (ended_at - started_at)) * 1000 end as duration_ms
      from trace_calls where ${sql.join(turnFilters, sql` and `)}
    ), threads as (
      select thread_id,
        count(*) as turn_count,
        min(started_at) as start_time,
        max(updated_at) as last_updated,
        (array_agg(id order by started_at asc, id asc))[1] as first_turn_id,
        (array_agg(id order by updated_at desc, id desc))[1] as last_turn_id,
        percentile_cont(0.5) within group (order by duration_ms) as p50_turn_duration_ms,
        percentile_cont(0.99) within group (order by duration_ms) as p99_turn_duration_ms
      from turns group by thread_id
    )
    select thread_id, turn_count, ${isoText(sql.ref('start_time'))} as start_time, ${isoText(sql.ref('last_updated'))} as last_updated,
      first_turn_id, last_turn_id, p50_turn_duration_ms, p99_turn_duration_ms
    from threads ${having.length ? sql`where ${sql.join(having, sql` and `)}` : sql``}
    order by ${orderBy(args.sortBy)}
    ${args.limit != null ? sql`limit ${args.limit}` : sql``} ${args.offset ? sql`offset ${args.offset}` : sql``}`;
}

export async function listThreads(db: Executor, args: ThreadsArgs): Promise<ThreadRow[]> {
  return (await threadsQuery(args).execute(db)).rows;
}
