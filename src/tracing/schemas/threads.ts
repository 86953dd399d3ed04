import { z } from 'zod';
import { DateTime, KeyList, Limit, Offset, ProjectId, SortByList } from './common.js';

/** Threads (reference §2.9). */

export const ThreadsQueryBody = z.object({
  project_id: ProjectId,
  filter: z
    .object({
      after_datetime: DateTime.nullish().describe('Threads whose first turn started after this.'),
      before_datetime: DateTime.nullish().describe('Threads last updated before this.'),
      thread_ids: KeyList.nullish(),
    })
    .nullish(),
  limit: Limit,
  offset: Offset,
  sort_by: SortByList.nullish()
    .describe('Fields: thread_id, turn_count, start_time, last_updated, p50_turn_duration_ms, p99_turn_duration_ms. Default last_updated desc.'),
});
export type ThreadsQueryBody = z.infer<typeof ThreadsQueryBody>;

export const ThreadSchema = z.object({
  thread_id: z.string(),
  turn_count: z.number(),
  start_time: z.string(),
  last_updated: z.string(),
  first_turn_id: z.string().nullable(),
  last_turn_id: z.string().nullable(),
  p50_turn_duration_ms: z.number().nullable(),
  p99_turn_duration_ms: z.number().nullable(),
});
