import type { ColumnType, Generated } from 'kysely';
import type { Timestamp } from '../auth/tables.js';
import type { EventType, JobKind, JobStatus, ResidentTrainer } from './schemas.js';

export type BestMode = 'max' | 'min';
export type CheckpointSource = 'trained' | 'imported';

declare const jsonbBrand: unique symbol;
/**
 * What a JSONB column accepts: only `jsonb(value)` of repository/json.ts makes one, because the pg driver
 * would turn a plain JS array into a Postgres array.
 */
export interface JsonbValue<T> {
  readonly [jsonbBrand]: T;
}
type Jsonb<T> = ColumnType<T, JsonbValue<T>, JsonbValue<T>>;
/** An identity column: generated on insert, never written. */
type Identity = ColumnType<number, never, never>;

export interface ModelTable {
  id: string;
  entity_id: string;
  project: string;
  name: string;
  base_model: string;
  run_id: string | null;
  created_at: Generated<Date>;
  /** Soft delete: jobs stay readable as CANCELED and the name can be registered again. */
  deleted_at: Timestamp | null;
  /** Retention policy (docs/training.md, "Checkpoint lifecycle"); null: keep every checkpoint. */
  keep_latest: ColumnType<number | null, number | null | undefined, number | null>;
  keep_best: ColumnType<number | null, number | null | undefined, number | null>;
  best_metric: ColumnType<string | null, string | null | undefined, string | null>;
  best_mode: ColumnType<BestMode, BestMode | undefined, BestMode>;
  checkpoint_ttl_seconds: ColumnType<number | null, number | null | undefined, number | null>;
}

export interface CheckpointTable {
  id: string;
  model_id: string;
  step: number;
  uri: string;
  metrics: Jsonb<Record<string, number>>;
  /** The job that produced it; null for checkpoints registered by other means. */
  job_id: string | null;
  created_at: Generated<Date>;
  /** Kept by every retention rule and never expires. */
  pinned: Generated<boolean>;
  /** `imported`: an adapter uploaded to trainyard, stored in its data directory (trainyard owns the files). */
  source: ColumnType<CheckpointSource, CheckpointSource | undefined, CheckpointSource>;
}

/**
 * A deleted checkpoint's id and step, kept a day (or until its model is deleted) so that a page cursor
 * naming it still says where the next page starts.
 */
export interface DeletedCheckpointTable {
  id: string;
  model_id: string;
  step: number;
  deleted_at: Generated<Date>;
}

/** Storage of deleted checkpoints that trainyard does not own, for the workers' side to release. */
export interface CheckpointReleaseTable {
  id: Generated<Identity>;
  entity_id: string;
  uri: string;
  reason: 'deleted' | 'retention' | 'expired';
  created_at: Generated<Date>;
  /** The deleted checkpoint's model and (lowest) step; null on releases recorded before they were kept. */
  model_id: string | null;
  step: number | null;
}

/** The turn each entity last had at a claim: the entity with the oldest turn is served next. */
export interface EntityClaimTurnTable {
  entity_id: string;
  /** bigint: read only inside SQL, where it orders claims. */
  turn: number;
}

/** One row per trajectory group per log call: groups are what clients send and what the trainer reads. */
export interface TrajectoryLogTable {
  id: Generated<Identity>;
  model_id: string;
  log_id: string;
  split: string;
  step: number;
  seq: number;
  payload: Jsonb<unknown>;
  created_at: Generated<Date>;
}

export interface MetricHistoryTable {
  id: Generated<Identity>;
  model_id: string;
  step: number;
  split: string;
  metrics: Jsonb<Record<string, number>>;
  created_at: Generated<Date>;
}

export interface TrainingJobTable {
  id: string;
  /** Creation order: a transaction's rows share one now(), so created_at alone cannot order them. */
  seq: Generated<Identity>;
  model_id: string;
  kind: JobKind;
  status: JobStatus;
  attempt: Generated<number>;
  max_attempts: number;
  base_step: number | null;
  target_step: number | null;
  config: Jsonb<Record<string, unknown>>;
  num_inputs: number;
  created_at: Generated<Date>;
  training_start: Timestamp | null;
  training_end: Timestamp | null;
  error_message: string | null;
  lease_token: string | null;
  lease_expires_at: Timestamp | null;
  worker_id: string | null;
  /** The worker's id for the claim that took the running job's lease (migration 0018). */
  claim_id: string | null;
  cancel_requested: Generated<boolean>;
  checkpoint_id: string | null;
}

/** A job's inputs, one trajectory group (RL) or training row (SFT) each, streamed to the worker as JSONL. */
export interface JobInputTable {
  job_id: string;
  seq: number;
  payload: Jsonb<unknown>;
}

export interface JobEventTable {
  id: string;
  /** Append order: event ids are random UUIDs, and clients page by "strictly after this event". */
  seq: Generated<Identity>;
  job_id: string;
  attempt: number;
  type: EventType;
  data: Jsonb<Record<string, unknown>>;
  created_at: Generated<Date>;
}

export interface WorkerTable {
  worker_id: string;
  api_key_id: string | null;
  last_seen_at: Timestamp;
  created_at: Generated<Date>;
  /** As the worker last reported it with a claim; null from workers that do not report it. */
  resident_trainers: ColumnType<ResidentTrainer[] | null, JsonbValue<ResidentTrainer[]> | null | undefined, JsonbValue<ResidentTrainer[]> | null>;
}

export interface TrainingTables {
  models: ModelTable;
  checkpoints: CheckpointTable;
  deleted_checkpoints: DeletedCheckpointTable;
  trajectory_logs: TrajectoryLogTable;
  metric_history: MetricHistoryTable;
  training_jobs: TrainingJobTable;
  job_inputs: JobInputTable;
  job_events: JobEventTable;
  workers: WorkerTable;
  checkpoint_releases: CheckpointReleaseTable;
  entity_claim_turns: EntityClaimTurnTable;
}
