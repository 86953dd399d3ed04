import { z } from 'zod';
import { CallsFilter, Query } from '../query/schema.js';
import { AnyJson, CallIdText, CallNameText, DateTime, FieldList, JsonObject, Key, StoredJson, StoredJsonObject, Limit, Offset, OpNameText, ProjectId, SortByList, TRACING_LIMITS } from './common.js';

/** Calls (reference §2.2). */

export const StartedCall = z.object({
  project_id: ProjectId,
  id: CallIdText.min(1).nullish(),
  op_name: OpNameText,
  display_name: CallNameText.nullish(),
  trace_id: CallIdText.min(1).nullish(),
  parent_id: CallIdText.nullish(),
  thread_id: CallIdText.nullish(),
  turn_id: CallIdText.nullish(),
  started_at: DateTime,
  attributes: StoredJsonObject,
  inputs: StoredJsonObject,
  otel_dump: StoredJsonObject.nullish(),
  wb_user_id: Key.nullish(),
  wb_run_id: Key.nullish(),
  wb_run_step: z.number().int().nullish(),
});
export type StartedCall = z.infer<typeof StartedCall>;

export const EndedCall = z.object({
  project_id: ProjectId,
  id: CallIdText.min(1),
  ended_at: DateTime,
  exception: z.string().nullish(),
  output: StoredJson.optional(),
  summary: StoredJsonObject,
  wb_run_step_end: z.number().int().nullish(),
  /** Sent by the JS SDK inside every `call/end` of a named call. */
  display_name: CallNameText.nullish(),
});
export type EndedCall = z.infer<typeof EndedCall>;

export const CallStartBody = z.object({ start: StartedCall });
export const CallEndBody = z.object({ end: EndedCall });
export const CallStartResponse = z.object({ id: z.string(), trace_id: z.string() });

export const UpsertItem = z.discriminatedUnion('mode', [
  z.object({ mode: z.literal('start'), req: CallStartBody }),
  z.object({ mode: z.literal('end'), req: CallEndBody }),
]);
export const UpsertBatchBody = z.object({ batch: z.array(UpsertItem).max(TRACING_LIMITS.batchItems) });
export const UpsertBatchResponse = z.object({ res: z.array(z.union([CallStartResponse, z.object({})])) });

export const CallSchema = z
  .object({
    id: z.string(),
    project_id: z.string(),
    op_name: z.string(),
    display_name: z.string().nullable(),
    trace_id: z.string(),
    parent_id: z.string().nullable(),
    thread_id: z.string().nullable(),
    turn_id: z.string().nullable(),
    started_at: z.string(),
    attributes: JsonObject,
    inputs: JsonObject,
    ended_at: z.string().nullable(),
    exception: z.string().nullable(),
    output: AnyJson,
    summary: JsonObject.nullable(),
    wb_user_id: z.string().nullable(),
    wb_username: z.string().nullish().describe('With include_usernames: the name of the user `wb_user_id` names'),
    wb_run_id: z.string().nullable(),
    wb_run_step: z.number().nullable(),
    wb_run_step_end: z.number().nullable(),
    deleted_at: z.string().nullable(),
    storage_size_bytes: z.number().nullish(),
    total_storage_size_bytes: z.number().nullish(),
  })
  .partial()
  .describe('A call; `summary.weave` (status, latency_ms, trace_name) is derived on read.');

export const CallReadBody = z.object({
  project_id: ProjectId,
  id: Key,
  include_costs: z.boolean().nullish(),
  include_storage_size: z.boolean().nullish(),
  include_total_storage_size: z.boolean().nullish(),
});
export const CallReadResponse = z.object({ call: CallSchema.nullable() });

export const CallUpdateBody = z.object({
  project_id: ProjectId,
  call_id: Key,
  display_name: CallNameText.nullish(),
  wb_user_id: Key.nullish(),
});

export const CallsDeleteBody = z.object({
  project_id: ProjectId,
  call_ids: z.array(Key).describe('At most 1000 ids (400 beyond).'),
  wb_user_id: Key.nullish(),
});
export const CallsDeleteResponse = z.object({ num_deleted: z.number() });

export const CallsQueryBody = z.object({
  project_id: ProjectId,
  filter: CallsFilter.nullish(),
  limit: Limit,
  offset: Offset,
  sort_by: SortByList.nullish(),
  query: Query.nullish(),
  include_costs: z.boolean().nullish(),
  include_feedback: z.boolean().nullish(),
  include_storage_size: z.boolean().nullish(),
  include_total_storage_size: z.boolean().nullish(),
  include_usernames: z.boolean().nullish().describe("Each call's `wb_username`: the name of the user its `wb_user_id` names (null when none)."),
  columns: FieldList.nullish(),
  expand_columns: FieldList.nullish(),
  return_expanded_column_values: z.boolean().nullish(),
});
export type CallsQueryBody = z.infer<typeof CallsQueryBody>;
export const CallsQueryResponse = z.object({ calls: z.array(CallSchema) });

export const CallsQueryStatsBody = z.object({
  project_id: ProjectId,
  filter: CallsFilter.nullish(),
  query: Query.nullish(),
  limit: Limit,
  include_total_storage_size: z.boolean().nullish(),
  expand_columns: FieldList.nullish(),
});
export const CallsQueryStatsResponse = z.object({
  count: z.number(),
  total_storage_size_bytes: z.number().nullish(),
  has_more: z.boolean().nullish(),
});
