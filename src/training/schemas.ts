import { z } from 'zod';
import { boundedDepth } from '../http/json-depth.js';
import { textWithoutNul } from '../http/validation.js';
import { NAME_SEGMENT } from '../inference/model-name.js';

/**
 * Request and response bodies of the training API (reference/training-api.md §3) and of the trainer-worker
 * protocol (docs/workers.md). Trajectory shapes accept all three client generations of reference §6: defaults may be
 * omitted, unknown keys are kept for the trainer, and message/choice items are checked only as far as the
 * server reads them, so that multi-MB bodies of logprobs are not walked key by key.
 */

const Uuid = z.uuid();
const Timestamp = z.string().describe('ISO 8601 date-time');

/** The largest value of an `integer` (int4) column: steps, sequence numbers, attempts. */
export const MAX_INT4 = 2_147_483_647;
/** Entity, project and model names and splits are index keys: bounded so that no key outgrows an index row. */
export const MAX_NAME_LENGTH = 128;

/**
 * A query-string text without U+0000, which PostgreSQL text cannot hold. Bodies are checked by the JSON
 * parser of the training scope (plugin.ts); query strings are not JSON, so each field says it here.
 */
export const queryText = textWithoutNul;

/**
 * Bounds on the lists one request carries (docs/training.md, "Limits"): far above what ART sends (a
 * step logs tens of groups of a few dozen trajectories, each with a handful of metrics), so that no
 * single request holds the database for long. Past one, the request answers 422 naming the field.
 */
export const TRAINING_LIMITS = {
  /** Trajectory groups of one log call or RL job. */
  groups: 10_000,
  /** Trajectories, exceptions or log lines of one group or trajectory; tools of one trajectory. */
  items: 10_000,
  /** Messages and choices of one trajectory or history. */
  messages: 100_000,
  /** Keys of one metrics map, and characters of a metric name. */
  metrics: 1000,
  metricName: 256,
  /**
   * Steps of one checkpoint delete: ART's delete_checkpoints names every step but the latest and the best,
   * so a long run sends thousands (and does not retry a 422).
   */
  steps: 100_000,
  /** Characters of a checkpoint URI a worker registers (Linux's PATH_MAX). */
  checkpointUri: 4096,
  /** Characters of a model's base model (a claim's `base_models` filter takes names up to this long). */
  baseModel: 512,
  /** Characters of an SFT job's `training_data_url` (a weave:/// ref or a file digest is far shorter). */
  url: 4096,
  /** Keys of a trajectory's or group's `metadata` map. */
  metadataKeys: 10_000,
} as const;

/**
 * A map of metrics sent to the server: at most TRAINING_LIMITS.metrics keys of at most metricName
 * characters; `what` names the keys in the refusal ("at most 1000 metrics in one map").
 */
const boundedMetrics = <T extends z.ZodType>(value: T, what = 'metrics in one map') =>
  z
    .record(z.string().max(TRAINING_LIMITS.metricName), value)
    .refine((metrics) => Object.keys(metrics).length <= TRAINING_LIMITS.metrics, `at most ${TRAINING_LIMITS.metrics} ${what}`);
/**
 * An object with any other keys (kept as sent), bounded like a metrics map: at most TRAINING_LIMITS.metrics
 * keys of at most metricName characters, each refused as the map's are.
 */
const boundedKeys = <T extends z.ZodType<Record<string, unknown>>>(schema: T, what: string) => {
  const bounds = boundedMetrics(z.unknown(), `keys in ${what}`);
  // A refinement, not an intersection: zod's intersection drops the record's key issues, and the OpenAPI
  // document keeps the object's own shape.
  return schema.check((payload) => {
    const checked = bounds.safeParse(payload.value);
    // The bounds' own issues, at the paths the map's are reported at (a key's at [..., key, '[key]']).
    if (!checked.success) payload.issues.push(...(checked.error.issues as z.core.$ZodRawIssue[]));
  });
};
/** Metric values from clients: numbers, and booleans that newer ART versions put in `metrics`. */
const MetricValue = z.union([z.number(), z.boolean()]);
const MetricMap = boundedMetrics(MetricValue);
/** Numbers a worker sends: gradient step data and checkpoint metrics. */
const WorkerNumberMap = boundedMetrics(z.number());
const NumberMap = z.record(z.string(), z.number());
/** A `metadata` map: any values (bounded in depth with the group), at most TRAINING_LIMITS.metadataKeys keys. */
const MetadataMap = z
  .record(z.string(), z.unknown())
  .refine((map) => Object.keys(map).length <= TRAINING_LIMITS.metadataKeys, `at most ${TRAINING_LIMITS.metadataKeys} keys in one metadata map`);

// ---------------------------------------------------------------------------------------------------------
// Pagination

/** Cursor page query of the reference (§3.3, §3.9); query strings arrive as text. */
const PageLimit = z.coerce.number().int().min(1).max(100).default(20);
const PageAfter = queryText().max(256).optional();

/** The OpenAI-style page envelope the ART client auto-paginates over (reference §2). */
export function Page<T extends z.ZodType>(item: T) {
  return z.object({
    object: z.literal('list'),
    data: z.array(item),
    first_id: z.string(),
    last_id: z.string(),
    has_more: z.boolean(),
  });
}
export interface PageOf<T> {
  object: 'list';
  data: T[];
  first_id: string;
  last_id: string;
  has_more: boolean;
}

// ---------------------------------------------------------------------------------------------------------
// Models

/**
 * A model's project and name: what a checkpoint's inference name (`entity/project/name:stepN`), a weave
 * project id and a W&B run or artifact name can all carry, so that a model registered under it can be
 * served, traced and logged. The pattern is checked by the service when a model is created, not here:
 * a model registered before the rule keeps answering `return_existing` (ART sends it at every start).
 */
const ModelNamePart = z
  .string()
  .min(1)
  .max(MAX_NAME_LENGTH)
  .meta({
    pattern: NAME_SEGMENT.source,
    description:
      "Letters, digits, '.', '_' and '-', starting with a letter or digit; a model registered under another name before this rule is still answered with `return_existing`.",
  });

export const ModelCreate = z.object({
  entity: z.string().min(1).max(MAX_NAME_LENGTH).nullish(),
  project: ModelNamePart,
  name: ModelNamePart,
  base_model: z.string().min(1).max(TRAINING_LIMITS.baseModel),
  return_existing: z.boolean().default(false),
});
export type ModelCreate = z.infer<typeof ModelCreate>;

export const Model = z.object({
  id: Uuid,
  entity: z.string(),
  project: z.string(),
  name: z.string(),
  base_model: z.string(),
  run_id: z.string().nullable(),
  created_at: Timestamp,
});
export type Model = z.infer<typeof Model>;

export const ModelListQuery = z.object({
  entity: queryText().min(1).max(MAX_NAME_LENGTH).optional(),
  project: queryText().min(1).max(MAX_NAME_LENGTH).optional(),
  after: PageAfter,
  limit: PageLimit,
});
export type ModelListQuery = z.infer<typeof ModelListQuery>;

export const DeleteModelResponse = z.object({
  model_id: Uuid,
  deleted_checkpoints: z.number().int(),
  deleted_run: z.boolean(),
});
export type DeleteModelResponse = z.infer<typeof DeleteModelResponse>;

export const BaseModelList = z.array(z.string());

// ---------------------------------------------------------------------------------------------------------
// Checkpoints

export const CheckpointListQuery = z.object({
  after: PageAfter,
  limit: PageLimit,
  order: z.enum(['asc', 'desc']).default('asc'),
});
export type CheckpointListQuery = z.infer<typeof CheckpointListQuery>;

export const Checkpoint = z.object({
  id: Uuid,
  step: z.number().int(),
  metrics: NumberMap,
});
export type Checkpoint = z.infer<typeof Checkpoint>;

export const CheckpointPage = Page(Checkpoint);
export type CheckpointPage = z.infer<typeof CheckpointPage>;

export const DeleteCheckpointsRequest = z.object({
  steps: z.array(z.int().min(0).max(MAX_INT4)).max(TRAINING_LIMITS.steps),
});
export type DeleteCheckpointsRequest = z.infer<typeof DeleteCheckpointsRequest>;

export const DeleteCheckpointsResponse = z.object({
  deleted_count: z.number().int(),
  not_found_steps: z.array(z.number().int()),
  pinned_steps: z.array(z.number().int()).describe('Steps spared because they are pinned (unpin to delete them)'),
  in_use_steps: z
    .array(z.number().int())
    .describe('Steps spared because a running job trains from them (its base checkpoint); delete them again once it ends'),
});
export type DeleteCheckpointsResponse = z.infer<typeof DeleteCheckpointsResponse>;

// ---------------------------------------------------------------------------------------------------------
// Trajectories (reference §6)

/** A plain chat message param: context the trainer does not train on. */
export const ChatMessage = z
  .object({
    role: z.string(),
    content: z.unknown().optional(),
  })
  .loose();

/**
 * A dumped OpenAI `Choice`: the trainable tokens. It has `message` and no top-level `role`; engines and ART
 * add keys (`stop_reason`, `token_ids`, `prompt_token_ids`, ...) that the trainer needs, so all are kept.
 * `logprobs` is left unchecked: it is the bulk of the body and only the trainer reads it.
 */
export const Choice = z
  .object({
    message: z.object({ role: z.string().optional(), content: z.unknown().optional() }).loose(),
    finish_reason: z.string().nullish(),
    index: z.number().int().nullish(),
    logprobs: z.unknown().optional(),
  })
  .loose();

export const MessageOrChoice = z.union([ChatMessage, Choice]);
export type MessageOrChoice = z.infer<typeof MessageOrChoice>;

export const Tool = z
  .object({
    type: z.string().optional(),
    function: z.object({ name: z.string() }).loose().optional(),
  })
  .loose();

export const History = z
  .object({
    messages_and_choices: z.array(MessageOrChoice).max(TRAINING_LIMITS.messages).optional(),
    tools: z.array(Tool).max(TRAINING_LIMITS.items).nullish(),
  })
  .loose();

/** Generation C: raw request/response pairs captured from HTTP clients, kept for the trainer. */
export const Exchanges = z
  .object({
    chat_completions: z.array(z.unknown()).max(TRAINING_LIMITS.messages).optional(),
    completions: z.array(z.unknown()).max(TRAINING_LIMITS.messages).optional(),
    responses: z.array(z.unknown()).max(TRAINING_LIMITS.messages).optional(),
    messages: z.array(z.unknown()).max(TRAINING_LIMITS.messages).optional(),
  })
  .loose();

/**
 * Every field is optional: the newest ART dumps with `exclude_defaults=True` (reference §6.3). `reward`
 * alone gets its default here because every consumer needs a number; list fields stay absent so that a
 * generation-C trajectory with `exchanges` is stored as sent.
 */
export const Trajectory = z
  .object({
    messages_and_choices: z.array(MessageOrChoice).max(TRAINING_LIMITS.messages).optional(),
    tools: z.array(Tool).max(TRAINING_LIMITS.items).nullish(),
    additional_histories: z.array(History).max(TRAINING_LIMITS.items).optional(),
    reward: z.number().default(0),
    initial_policy_version: z.int().nullish(),
    final_policy_version: z.int().nullish(),
    metrics: MetricMap.optional(),
    auto_metrics: MetricMap.optional(),
    metadata: MetadataMap.optional(),
    logs: z.array(z.string()).max(TRAINING_LIMITS.items).optional(),
    start_time: z.string().nullish(),
    exchanges: Exchanges.optional(),
  })
  .loose();
export type Trajectory = z.infer<typeof Trajectory>;

/** ART's `PydanticException`: `type` is `str(type(exc))`, `traceback` the joined text. */
export const GroupException = z
  .object({
    type: z.string().optional(),
    message: z.string().optional(),
    traceback: z.string().optional(),
  })
  .loose();

export const TrajectoryGroup = z
  .object({
    trajectories: z.array(Trajectory).max(TRAINING_LIMITS.items).optional(),
    exceptions: z.array(GroupException).max(TRAINING_LIMITS.items).optional(),
    metadata: MetadataMap.optional(),
    metrics: MetricMap.optional(),
    logs: z.array(z.string()).max(TRAINING_LIMITS.items).optional(),
  })
  .loose();
export type TrajectoryGroup = z.infer<typeof TrajectoryGroup>;

/** Each group is stored as one JSONB value, so the storage nesting bound (MAX_JSON_DEPTH) applies per group. */
const StoredGroup = boundedDepth(TrajectoryGroup);

// ---------------------------------------------------------------------------------------------------------
// Log

export const LogRequest = z.object({
  split: z.string().min(1).max(MAX_NAME_LENGTH),
  trajectory_groups: z.array(StoredGroup).max(TRAINING_LIMITS.groups),
});
export type LogRequest = z.infer<typeof LogRequest>;

export const LogResponse = z.object({
  step: z.number().int(),
  metrics: NumberMap,
});
export type LogResponse = z.infer<typeof LogResponse>;

/** The web UI's "rollouts at a step": stored groups of one (split, step), paged by their log order. */
export const TrajectoryListQuery = z.object({
  split: queryText().min(1).max(MAX_NAME_LENGTH),
  step: z.coerce.number().int().min(0).max(2_147_483_647),
  after: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});
export type TrajectoryListQuery = z.infer<typeof TrajectoryListQuery>;

export const StoredTrajectoryGroup = z.object({
  id: z.string(),
  step: z.number().int(),
  split: z.string(),
  group: z.unknown(),
});
export type StoredTrajectoryGroup = z.infer<typeof StoredTrajectoryGroup>;

/** A page of metric records holds at most this many (a long run logs one or two a step). */
export const METRIC_PAGE_LIMIT = 10_000;

export const MetricHistoryQuery = z.object({
  split: queryText().min(1).max(MAX_NAME_LENGTH).optional(),
  after: z
    .string()
    .regex(/^[0-9]{1,18}$/, 'must be the id of a metric record')
    .optional()
    .describe('Cursor: the id of the last record of the previous page.'),
  limit: z.coerce.number().int().min(1).max(METRIC_PAGE_LIMIT).default(METRIC_PAGE_LIMIT),
  order: z.enum(['asc', 'desc']).default('asc').describe('asc: oldest step first; desc: newest first'),
});
export type MetricHistoryQuery = z.infer<typeof MetricHistoryQuery>;

export const MetricRecord = z.object({
  id: z.string(),
  step: z.number().int(),
  split: z.string(),
  metrics: NumberMap,
  created_at: Timestamp,
});
export type MetricRecord = z.infer<typeof MetricRecord>;

export const MetricHistory = Page(MetricRecord);
export type MetricHistory = z.infer<typeof MetricHistory>;

// ---------------------------------------------------------------------------------------------------------
// RL jobs (reference §3.6)

/**
 * The 25 keys of generation B, each nullable because the latest ART sends every key with unset ones as
 * null; unknown keys from newer clients pass through to the trainer.
 */
export const ExperimentalTrainingConfig = z
  .object({
    advantage_balance: z.number().nullish(),
    allow_training_without_logprobs: z.boolean().nullish(),
    epsilon: z.number().nullish(),
    epsilon_high: z.number().nullish(),
    importance_sampling_level: z.enum(['token', 'sequence', 'average', 'geometric_average']).nullish(),
    kimi_k2_tau: z.number().nullish(),
    kl_penalty_coef: z.number().nullish(),
    kl_penalty_reference_step: z.int().min(0).max(MAX_INT4).nullish(),
    kl_penalty_source: z.enum(['current_learner', 'sample']).nullish(),
    kl_penalty_step_lag: z.int().min(1).nullish(),
    kl_ref_adapter_path: z.string().max(TRAINING_LIMITS.checkpointUri).nullish(),
    learning_rate: z.number().positive().nullish(),
    logprob_calculation_chunk_size: z.int().min(1).nullish(),
    loss_fn: z.enum(['cispo', 'ppo']).nullish(),
    mask_prob_ratio: z.boolean().nullish(),
    max_negative_advantage_importance_sampling_weight: z.number().nullish(),
    normalize_advantages: z.boolean().nullish(),
    num_trajectories_learning_rate_multiplier_power: z.number().nullish(),
    packed_sequence_length: z.int().min(1).nullish(),
    plot_tensors: z.boolean().nullish(),
    ppo: z.boolean().nullish(),
    precalculate_logprobs: z.boolean().nullish(),
    scale_learning_rate_by_reward_std_dev: z.boolean().nullish(),
    scale_rewards: z.boolean().nullish(),
    truncated_importance_sampling: z.number().nullish(),
  })
  .loose();
export type ExperimentalTrainingConfig = z.infer<typeof ExperimentalTrainingConfig>;

export const CreateTrainingJob = z.object({
  model_id: Uuid,
  trajectory_groups: z.array(StoredGroup).max(TRAINING_LIMITS.groups),
  experimental_config: boundedDepth(boundedKeys(ExperimentalTrainingConfig, 'experimental_config')).nullish(),
});
export type CreateTrainingJob = z.infer<typeof CreateTrainingJob>;

// ---------------------------------------------------------------------------------------------------------
// SFT jobs (reference §3.7)

export const SFTMetricLoggingConfig = z
  .object({
    enabled: z.boolean().optional(),
    target_training_step: z.int().nullish(),
  })
  .loose();

export const SFTTrainingConfig = z
  .object({
    batch_size: z.union([z.int().min(1), z.literal('auto')]).nullish(),
    learning_rate: z.union([z.number().positive(), z.array(z.number().positive()).min(1).max(TRAINING_LIMITS.messages)]).nullish(),
    assistant_turns: z.enum(['all', 'last']).nullish(),
    metric_logging: SFTMetricLoggingConfig.nullish(),
  })
  .loose();
export type SFTTrainingConfig = z.infer<typeof SFTTrainingConfig>;

/**
 * `training_folder_url` is the key an intermediate ART client sent (reference §3.7); both are accepted and
 * the output carries `training_data_url` only.
 */
export const CreateSFTTrainingJob = z
  .object({
    model_id: Uuid,
    training_data_url: z.string().min(1).max(TRAINING_LIMITS.url).optional(),
    training_folder_url: z.string().min(1).max(TRAINING_LIMITS.url).optional(),
    config: boundedDepth(boundedKeys(SFTTrainingConfig, 'config')).nullish(),
    experimental_config: boundedDepth(boundedKeys(z.record(z.string(), z.unknown()), 'experimental_config')).nullish(),
  })
  .superRefine((body, ctx) => {
    if (body.training_data_url === undefined && body.training_folder_url === undefined) {
      ctx.addIssue({ code: 'invalid_type', expected: 'string', path: ['training_data_url'], input: undefined });
    }
  })
  .transform(({ training_folder_url, ...body }) => ({
    ...body,
    training_data_url: (body.training_data_url ?? training_folder_url) as string,
  }));
export type CreateSFTTrainingJob = z.output<typeof CreateSFTTrainingJob>;

/** One SFT training row as the worker receives it (ART's `train.jsonl` line). */
export const SFTRow = z
  .object({
    messages: z.array(z.looseObject({ role: z.string() })).min(1).max(TRAINING_LIMITS.messages),
    tools: z.array(Tool).max(TRAINING_LIMITS.items).nullish(),
  })
  .loose();
export type SFTRow = z.infer<typeof SFTRow>;

// ---------------------------------------------------------------------------------------------------------
// Jobs and events

export const JobKind = z.enum(['rl', 'sft']);
export type JobKind = z.infer<typeof JobKind>;

export const JobStatus = z.enum(['QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELED']);
export type JobStatus = z.infer<typeof JobStatus>;

export const TrainingJobCreated = z.object({ id: Uuid });
export type TrainingJobCreated = z.infer<typeof TrainingJobCreated>;

export const TrainingJob = z.object({
  id: Uuid,
  model_id: Uuid,
  kind: JobKind,
  status: JobStatus,
  created_at: Timestamp,
  training_start: Timestamp.nullable(),
  training_end: Timestamp.nullable(),
  error_message: z.string().nullable(),
  attempt: z.number().int(),
  base_step: z.number().int().nullable(),
  target_step: z.number().int().nullable(),
  cancel_requested: z.boolean(),
});
export type TrainingJob = z.infer<typeof TrainingJob>;

export const TrainingJobListQuery = z.object({
  model_id: Uuid.optional(),
  status: JobStatus.optional(),
  after: PageAfter,
  limit: PageLimit,
});
export type TrainingJobListQuery = z.infer<typeof TrainingJobListQuery>;

export const TrainingJobPage = Page(TrainingJob);

export const EventType = z.enum(['training_started', 'gradient_step', 'training_ended', 'training_failed']);
export type EventType = z.infer<typeof EventType>;

export const TrainingJobEvent = z.object({
  id: Uuid,
  type: EventType,
  data: z.record(z.string(), z.unknown()),
});
export type TrainingJobEvent = z.infer<typeof TrainingJobEvent>;

export const EventListQuery = z.object({
  after: PageAfter,
  limit: PageLimit,
});
export type EventListQuery = z.infer<typeof EventListQuery>;

export const TrainingJobEventPage = Page(TrainingJobEvent);

/** How long an event stream stays open at most; EventSource reconnects with Last-Event-ID and goes on where it was. */
const EVENT_STREAM_MAX_SECONDS = 600;

export const EventStreamQuery = z.object({
  after: PageAfter,
  max_seconds: z.coerce
    .number()
    .int()
    .min(1)
    .max(EVENT_STREAM_MAX_SECONDS)
    .default(EVENT_STREAM_MAX_SECONDS)
    .describe('How long the stream stays open at most before the server closes it (a finished job closes it sooner).'),
});

/** A reconnecting EventSource names the last event it read; a stream starts after it. */
export const EventStreamHeaders = z.object({ 'last-event-id': z.string().max(256).optional() });

/**
 * One message of an event stream as an SSE client reads it (the schema each streamed event is described
 * by): `event` job, an event type or end; `data` one line of JSON; `id` an event's id (events only).
 */
export const ServerSentEvent = z.object({
  event: z.string().optional(),
  data: z.string().optional(),
  id: z.string().optional(),
  retry: z.number().int().optional(),
});

/** The training API's error form: `{"detail": "..."}` (validation errors: FastAPI's list of details). */
export const ErrorDetail = z.object({ detail: z.string() });

// ---------------------------------------------------------------------------------------------------------
// Trainer-worker protocol (docs/workers.md)

/** A trainer process a worker keeps loaded between jobs (docs/worker-runtime.md#resident-trainers). */
export const ResidentTrainer = z.object({
  base_model: z.string().min(1).max(512).describe('The base model it keeps loaded.'),
  model_id: Uuid.nullable().describe("The model whose adapter and optimizer state it holds from its last job (null: none)."),
});
export type ResidentTrainer = z.infer<typeof ResidentTrainer>;

export const ClaimRequest = z.object({
  worker_id: z.string().min(1).max(200),
  kinds: z.array(JobKind).min(1).max(10).optional(),
  base_models: z.array(z.string().min(1).max(TRAINING_LIMITS.baseModel)).min(1).max(100).optional(),
  wait_seconds: z.number().min(0).max(30).default(0),
  claim_id: Uuid.optional().describe(
    'An id the worker picks for this claim and repeats when it retries it: while the job that claim took still runs under its lease, a claim with the same id and worker_id answers that job and lease again (the lease renewed) instead of taking another, so a claim whose answer was lost costs no attempt.',
  ),
  resident_trainers: z
    .array(ResidentTrainer)
    .max(256)
    .optional()
    .describe("The worker's idle resident trainers at the time of the claim, shown by /v1/admin/workers."),
});
export type ClaimRequest = z.infer<typeof ClaimRequest>;

/**
 * How long a lease lasts from the answer that carries it, on the server's clock. A worker times that from
 * the answer's arrival on its own monotonic clock: comparing `expires_at` with another machine's clock
 * would make a lease lapse early (or late) by however far the two clocks disagree.
 */
const LeaseExpiresInMs = z
  .int()
  .min(0)
  .optional()
  .describe(
    'Milliseconds the lease lasts from this answer (WORKER_LEASE_SECONDS): time it from the answer\'s arrival on the worker\'s own clock, since `expires_at` is a time on the server\'s clock and the machines\' clocks need not agree. Absent from servers that do not send it.',
  );

export const Lease = z.object({
  token: Uuid,
  expires_at: Timestamp,
  expires_in_ms: LeaseExpiresInMs,
});
export type Lease = z.infer<typeof Lease>;

export const ClaimedJob = z.object({
  id: Uuid,
  kind: JobKind,
  attempt: z.number().int(),
  model: z.object({
    id: Uuid,
    entity: z.string(),
    project: z.string(),
    name: z.string(),
    base_model: z.string(),
  }),
  base_checkpoint: z.object({ id: Uuid, step: z.number().int(), uri: z.string() }).nullable(),
  kl_reference_checkpoint: z
    .object({ id: Uuid, step: z.number().int(), uri: z.string() })
    .nullable()
    .optional()
    .describe(
      'The checkpoint an RL job\'s KL penalty compares against (experimental_config.kl_penalty_reference_step, or the base step minus kl_penalty_step_lag), for the trainer to load from its uri; null when the job has none (KL off, kl_ref_adapter_path, or step 0: the base model). Absent from servers that do not resolve it.',
    ),
  target_step: z.number().int(),
  config: z.record(z.string(), z.unknown()),
  num_inputs: z.number().int(),
  inputs_url: z.string(),
});
export type ClaimedJob = z.infer<typeof ClaimedJob>;

export const ClaimResponse = z.object({ job: ClaimedJob, lease: Lease });
export type ClaimResponse = z.infer<typeof ClaimResponse>;

/** What a worker checks its own setup against when it starts (docs/workers.md, "Checkpoint URIs"). */
export const WorkerSettingsResponse = z.object({
  checkpoint_uri_prefixes: z.array(z.string()).describe('CHECKPOINT_URI_PREFIXES: a checkpoint URI must start with one of them to be registered.'),
});
export type WorkerSettingsResponse = z.infer<typeof WorkerSettingsResponse>;

const LeaseToken = z.uuid();

export const HeartbeatRequest = z.object({ lease_token: LeaseToken });
export type HeartbeatRequest = z.infer<typeof HeartbeatRequest>;

export const HeartbeatResponse = z.object({
  expires_at: Timestamp,
  expires_in_ms: LeaseExpiresInMs,
  cancel_requested: z.boolean(),
});
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;

/**
 * The events a worker may post. `training_ended` and `training_failed` are written by complete and fail,
 * in the same transaction as the state change. `gradient_step` values must be finite numbers because the
 * ART client passes each through `float()` (reference §3.9); zod 4 numbers already refuse Infinity and NaN.
 */
export const WorkerEvent = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('training_started'),
    data: boundedDepth(boundedKeys(z.object({ num_sequences: z.int().min(0) }).loose(), 'training_started data')),
  }),
  z.object({
    type: z.literal('gradient_step'),
    data: WorkerNumberMap,
  }),
]);
export type WorkerEvent = z.infer<typeof WorkerEvent>;

export const PostEventsRequest = z.object({
  lease_token: LeaseToken,
  events: z.array(WorkerEvent).min(1).max(1000),
  first_seq: z
    .int()
    .min(0)
    .optional()
    .describe(
      'How many events this worker posted in this attempt before this batch (0 for the first). With it a repeated batch is not appended again: the events already stored answer their stored ids. Beyond what is stored: 422.',
    ),
});
export type PostEventsRequest = z.infer<typeof PostEventsRequest>;

export const PostEventsResponse = z.object({
  ids: z.array(Uuid),
});
export type PostEventsResponse = z.infer<typeof PostEventsResponse>;

export const CompleteRequest = z.object({
  lease_token: LeaseToken,
  checkpoint: z.object({
    uri: z.string().min(1).max(TRAINING_LIMITS.checkpointUri),
    metrics: WorkerNumberMap.default({}),
  }),
});
export type CompleteRequest = z.infer<typeof CompleteRequest>;

export const CompleteResponse = z.object({
  job: TrainingJob,
  checkpoint: z.object({ id: Uuid, step: z.number().int(), uri: z.string(), metrics: NumberMap }),
});
export type CompleteResponse = z.infer<typeof CompleteResponse>;

export const FailRequest = z.object({
  lease_token: LeaseToken,
  error_message: z.string().min(1).max(10_000),
  retryable: z.boolean().default(false),
});
export type FailRequest = z.infer<typeof FailRequest>;

// ---------------------------------------------------------------------------------------------------------
// Path parameters. Ids are plain strings here: one that is not a UUID names nothing, so it answers 404
// like any other unknown id rather than a 422 about its format.

export const ModelParams = z.object({ model_id: z.string().describe('Model id (UUID)') });
export const TrainingJobParams = z.object({ training_job_id: z.string().describe('Training job id (UUID)') });
export const WorkerJobParams = z.object({ job_id: z.string().describe('Training job id (UUID)') });

export const FailResponse = z.object({ job: TrainingJob });
export type FailResponse = z.infer<typeof FailResponse>;
