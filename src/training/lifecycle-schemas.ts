import { z } from 'zod';
import { RETENTION_LIMITS } from './retention-limits.js';
import { MAX_INT4, queryText, TRAINING_LIMITS } from './schemas.js';

/**
 * Bodies of the checkpoint lifecycle routes (docs/training.md, "Checkpoint lifecycle"): a model's
 * retention policy, checkpoints with their lifecycle state, pins.
 */

/**
 * The policy as PUT sends it: every field optional, an omitted one is off (null) or `max`. Unknown keys
 * are refused, so that a misspelt `keep_lastest` is a 422 rather than a policy that silently keeps all.
 */
export const RetentionPolicyBody = z
  .strictObject({
    keep_latest: z.int().min(1).max(RETENTION_LIMITS.keepLatest).nullish().describe('Keep the latest N checkpoints; null: keep every checkpoint (only the TTL deletes)'),
    keep_best: z.int().min(1).max(RETENTION_LIMITS.keepBest).nullish().describe('Keep the best K by best_metric (default 1 when best_metric is set)'),
    best_metric: z.string().min(1).max(TRAINING_LIMITS.metricName).nullish().describe('A metric the model logged or its checkpoints carry, e.g. val/reward'),
    best_mode: z.enum(['max', 'min']).default('max').describe('max: higher is better'),
    ttl_seconds: z
      .int()
      .min(RETENTION_LIMITS.minTtlSeconds)
      .max(RETENTION_LIMITS.maxTtlSeconds)
      .nullish()
      .describe('Unpinned checkpoints that are neither latest nor best expire this long after they were registered'),
  })
  .superRefine((body, ctx) => {
    if (body.keep_best != null && body.best_metric == null) {
      ctx.addIssue({ code: 'custom', path: ['best_metric'], input: body.best_metric, message: 'best_metric is required when keep_best is set' });
    }
  });
export type RetentionPolicyBody = z.output<typeof RetentionPolicyBody>;

export const RetentionPolicy = z.object({
  keep_latest: z.number().int().nullable(),
  keep_best: z.number().int().nullable(),
  best_metric: z.string().nullable(),
  best_mode: z.enum(['max', 'min']),
  ttl_seconds: z.number().int().nullable(),
});
export type RetentionPolicy = z.infer<typeof RetentionPolicy>;

export const RetentionApplied = z.object({
  deleted_steps: z.array(z.number().int()).describe('Steps the policy does not keep, deleted now'),
  expired_steps: z.array(z.number().int()).describe('Steps whose TTL had passed, deleted now'),
});
export type RetentionApplied = z.infer<typeof RetentionApplied>;

export const CheckpointState = z.object({
  id: z.uuid(),
  step: z.number().int(),
  metrics: z.record(z.string(), z.number()),
  pinned: z.boolean(),
  latest: z.boolean().describe('Among the latest keep_latest (the latest one when the count rule is off)'),
  best: z.boolean().describe('Among the best keep_best by best_metric'),
  expires_at: z.string().nullable().describe('When the TTL deletes it; null: it does not expire'),
  source: z.enum(['trained', 'imported']),
  created_at: z.string(),
});
export type CheckpointState = z.infer<typeof CheckpointState>;

export const BestCheckpointQuery = z.object({
  metric: queryText().min(1).max(TRAINING_LIMITS.metricName).describe('A checkpoint metric, e.g. val/reward'),
  mode: z.enum(['max', 'min']).default('max').describe('max: higher is better'),
});
export type BestCheckpointQuery = z.infer<typeof BestCheckpointQuery>;

export const BestCheckpoint = z.object({
  metric: z.string(),
  mode: z.enum(['max', 'min']),
  checkpoint: z
    .object({ id: z.uuid(), step: z.number().int(), value: z.number() })
    .nullable()
    .describe('The best checkpoint by the metric (ties: the later step); null when no checkpoint has a number for it'),
});
export type BestCheckpoint = z.infer<typeof BestCheckpoint>;

export const CheckpointStepParams = z.object({
  model_id: z.string().describe('Model id (UUID)'),
  step: z.coerce.number().int().min(0).max(MAX_INT4).describe('Checkpoint step'),
});

/** Most releases one call lists or acknowledges. */
export const RELEASES_PER_CALL = 1000;

/** A release id: a positive integer below 10^18, as a string. */
const ReleaseId = z.string().regex(/^[1-9][0-9]{0,17}$/);

export const ReleaseListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(RELEASES_PER_CALL).default(100),
  after: ReleaseId.optional().describe('List only releases with a larger id: the last id of the previous page, to page past releases left for another part of the worker side'),
});

export const CheckpointReleaseList = z.object({
  data: z.array(
    z.object({
      id: z.string().describe('Release id, to acknowledge'),
      uri: z.string().describe('The deleted checkpoint\'s storage, to delete'),
      reason: z.enum(['deleted', 'retention', 'expired']),
      created_at: z.string(),
    }),
  ),
});

export const AcknowledgeReleases = z.object({
  ids: z.array(ReleaseId).min(1).max(RELEASES_PER_CALL),
});

export const ReleasesAcknowledged = z.object({ acknowledged: z.number().int() });
export type CheckpointReleaseList = z.infer<typeof CheckpointReleaseList>;
