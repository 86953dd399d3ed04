/** The API shapes the pages read (subsets of openapi/openapi.json). */

export interface Model {
  id: string;
  entity: string;
  project: string;
  name: string;
  base_model: string;
  created_at: string;
}

export interface Job {
  id: string;
  model_id: string;
  kind: 'rl' | 'sft';
  status: 'QUEUED' | 'RUNNING' | 'COMPLETED' | 'FAILED' | 'CANCELED';
  created_at: string;
  training_start: string | null;
  training_end: string | null;
  error_message: string | null;
  attempt: number;
  base_step: number | null;
  target_step: number | null;
  cancel_requested: boolean;
}

export interface JobEvent {
  id: string;
  type: 'training_started' | 'gradient_step' | 'training_ended' | 'training_failed';
  data: Record<string, unknown>;
}

export interface Checkpoint {
  id: string;
  step: number;
  metrics: Record<string, number>;
}

/** A checkpoint with its lifecycle state (GET .../checkpoints/lifecycle). */
export interface CheckpointState extends Checkpoint {
  pinned: boolean;
  latest: boolean;
  best: boolean;
  expires_at: string | null;
  source: 'trained' | 'imported';
  created_at: string;
}

export interface RetentionPolicy {
  keep_latest: number | null;
  keep_best: number | null;
  best_metric: string | null;
  best_mode: 'max' | 'min';
  ttl_seconds: number | null;
}

export interface MetricRecord {
  step: number;
  split: string;
  metrics: Record<string, number>;
  created_at: string;
}

export interface Call {
  id: string;
  trace_id: string;
  parent_id: string | null;
  op_name: string;
  display_name: string | null;
  started_at: string;
  ended_at: string | null;
  exception: string | null;
  inputs?: Record<string, unknown>;
  output?: unknown;
  attributes?: Record<string, unknown>;
  summary?: {
    // Written by any client: entries may be null and counts not numbers (lib/calls.ts reads them with care).
    weave?: { status?: string; latency_ms?: number; trace_name?: string; costs?: Record<string, unknown> };
    usage?: Record<string, unknown>;
  } | null;
}
