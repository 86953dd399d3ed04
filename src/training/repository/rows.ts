import type { Selectable } from 'kysely';
import type { Checkpoint, Model, TrainingJob } from '../schemas.js';
import type { CheckpointSource, CheckpointTable, ModelTable, TrainingJobTable } from '../tables.js';
import { iso } from './db.js';

/**
 * The rows the training repository modules share, as the domain objects above them see them, with one
 * mapper per table. They live here, not in their table's module, so that the modules import each other
 * one way only (models -> jobs -> events, checkpoints -> retention, each deleting module -> deleted; every
 * one -> rows -> db).
 */

/** A live model the caller may reach. Functions on a model's checkpoints, logs and jobs take one of these. */
export interface StoredModel extends Model {
  entity_id: string;
}

export type ModelRow = Selectable<ModelTable> & { entity: string };

export function toModel(row: ModelRow): StoredModel {
  return {
    id: row.id,
    entity: row.entity,
    entity_id: row.entity_id,
    project: row.project,
    name: row.name,
    base_model: row.base_model,
    run_id: row.run_id,
    created_at: iso(row.created_at),
  };
}

export interface StoredCheckpoint extends Checkpoint {
  model_id: string;
  uri: string;
  job_id: string | null;
  created_at: string;
}

export function toCheckpoint(row: Selectable<CheckpointTable>): StoredCheckpoint {
  return {
    id: row.id,
    model_id: row.model_id,
    step: row.step,
    uri: row.uri,
    metrics: row.metrics,
    job_id: row.job_id,
    created_at: iso(row.created_at),
  };
}

/** A deleted checkpoint: what the inference router unloads and whose storage is released. */
export interface DeletedCheckpoint {
  id: string;
  step: number;
  uri: string;
  source: CheckpointSource;
}

export interface StoredJob extends TrainingJob {
  max_attempts: number;
  config: Record<string, unknown>;
  num_inputs: number;
  worker_id: string | null;
  lease_expires_at: string | null;
  checkpoint_id: string | null;
}

export function toJob(row: Selectable<TrainingJobTable>): StoredJob {
  return {
    id: row.id,
    model_id: row.model_id,
    kind: row.kind,
    status: row.status,
    created_at: iso(row.created_at),
    training_start: iso(row.training_start),
    training_end: iso(row.training_end),
    error_message: row.error_message,
    attempt: row.attempt,
    base_step: row.base_step,
    target_step: row.target_step,
    cancel_requested: row.cancel_requested,
    max_attempts: row.max_attempts,
    config: row.config,
    num_inputs: row.num_inputs,
    worker_id: row.worker_id,
    lease_expires_at: iso(row.lease_expires_at),
    checkpoint_id: row.checkpoint_id,
  };
}
