import { z } from 'zod';
import { CallEndBody, CallStartBody, StartedCall } from './calls.js';
import { CallIdText, DateTime, StoredJson, StoredJsonObject, TRACING_LIMITS } from './common.js';

/** The v2 call routes of newer Python clients (reference §2.12). */

export const V2Params = z.object({ entity: z.string(), project: z.string() });

/** A finished call in one record. */
export const CompletedCall = StartedCall.extend({
  id: CallIdText.min(1),
  trace_id: CallIdText.min(1),
  ended_at: DateTime,
  exception: z.string().nullish(),
  output: StoredJson.optional(),
  summary: StoredJsonObject,
  wb_run_step_end: z.number().int().nullish(),
});
export type CompletedCall = z.infer<typeof CompletedCall>;

export const CallsCompleteBody = z.object({ batch: z.array(CompletedCall).max(TRACING_LIMITS.batchItems) });
export const V2CallStartBody = CallStartBody;
export const V2CallEndBody = CallEndBody;
