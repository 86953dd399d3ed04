import { z } from 'zod';
import { Query } from '../query/schema.js';
import { AnyJson, FieldList, indexedKey, JsonObject, Key, StoredJsonObject, Limit, Offset, ProjectId, SortByList, TRACING_LIMITS } from './common.js';

/** Feedback (reference §2.7). */

export const FeedbackCreateBody = z.object({
  id: Key.min(1).nullish().describe('Honoured when given; a UUID v7 otherwise.'),
  project_id: ProjectId,
  weave_ref: indexedKey('weave_ref').describe('A weave:/// ref in the same project (the target need not exist yet).'),
  creator: Key.nullish(),
  feedback_type: Key.min(1).describe('wandb.reaction.1, wandb.note.1, wandb.annotation.<name>, wandb.runnable.<name>, or any custom type'),
  payload: StoredJsonObject.describe('At most 1 MiB serialised.'),
  annotation_ref: Key.nullish(),
  runnable_ref: Key.nullish(),
  call_ref: Key.nullish(),
  trigger_ref: Key.nullish(),
  queue_id: Key.nullish(),
  wb_user_id: Key.nullish().describe('Ignored: set from the key.'),
});
export type FeedbackCreateBody = z.infer<typeof FeedbackCreateBody>;

export const FeedbackCreateResponse = z.object({
  id: z.string(),
  created_at: z.string(),
  wb_user_id: z.string(),
  payload: JsonObject,
});

export const FeedbackBatchCreateBody = z.object({ batch: z.array(FeedbackCreateBody).max(TRACING_LIMITS.batchItems) });
export const FeedbackBatchCreateResponse = z.object({ res: z.array(FeedbackCreateResponse) });

export const FeedbackReplaceBody = FeedbackCreateBody.extend({ feedback_id: Key.describe('The row to replace.') });

export const FeedbackQueryBody = z.object({
  project_id: ProjectId,
  fields: FieldList.nullish().describe('Columns, `<column>_dump`, `payload.<path>` or `count(*)`; default all columns.'),
  query: Query.nullish(),
  sort_by: SortByList.nullish(),
  limit: Limit,
  offset: Offset,
});
export const FeedbackQueryResponse = z.object({
  result: z.array(z.record(z.string(), AnyJson)),
  total_count: z.number().int().describe('Rows the query matches, whatever limit and offset.'),
});

export const FeedbackPurgeBody = z.object({ project_id: ProjectId, query: Query.describe('Ids only: $eq on id, $or of those, or $in on id.') });
