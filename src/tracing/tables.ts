import type { ColumnType, Generated } from 'kysely';
import type { JsonValue } from './json.js';

/**
 * Row types of the tracing tables (migrations/0003_tracing.ts), prefixed `trace_` so that no other
 * area's `files` or `objects` can collide. `project_id` is the external `entity/project` string the
 * clients send. JSONB columns are written with `jsonb()` from ./json.js.
 */

type Timestamp = ColumnType<Date, Date | string, Date | string>;
type Jsonb = ColumnType<JsonValue, JsonValue, JsonValue>;

/**
 * One row per call, merged from its start and end in either order: until the start arrives the start
 * columns are null and the call is invisible to reads (reference §3.6).
 */
export interface CallTable {
  project_id: string;
  id: string;
  trace_id: string | null;
  parent_id: string | null;
  op_name: string | null;
  /** `''` is the clients' "no name" and reads back as null. */
  display_name: string | null;
  thread_id: string | null;
  turn_id: string | null;
  started_at: Timestamp | null;
  ended_at: Timestamp | null;
  exception: string | null;
  attributes: Jsonb | null;
  inputs: Jsonb | null;
  output: Jsonb | null;
  summary: Jsonb | null;
  /** Stored as `json`, not jsonb (migration 0006): returned whole, never queried. */
  otel_dump: Jsonb | null;
  /** Every `weave:///` string found in inputs / output, extracted on write for the ref filters. */
  input_refs: ColumnType<string[], string[] | undefined, string[]>;
  output_refs: ColumnType<string[], string[] | undefined, string[]>;
  wb_user_id: string | null;
  wb_run_id: string | null;
  wb_run_step: number | null;
  wb_run_step_end: number | null;
  deleted_at: Timestamp | null;
  /** Whether the payloads may hold numbers a double would change (tracing/exact-numbers.ts): read as text when they may. */
  exact_numbers: ColumnType<boolean, boolean | undefined, boolean>;
}

/** One row per object version; a version is a distinct digest of one object id. */
export interface ObjectVersionTable {
  project_id: string;
  object_id: string;
  digest: string;
  kind: 'op' | 'object';
  base_object_class: string | null;
  leaf_object_class: string | null;
  val: Jsonb;
  /** 0-based, in order of first creation per (project, kind, object id); kept when others are deleted. */
  version_index: number;
  wb_user_id: string | null;
  created_at: Generated<Date>;
  deleted_at: Timestamp | null;
}

/** A user-set tag of one object version (migration 0008). */
export interface ObjectTagTable {
  project_id: string;
  object_id: string;
  digest: string;
  tag: string;
  created_at: Generated<Date>;
}

/** A user-set alias: names one version (digest) of an object id; setting it again moves it (migration 0008). */
export interface ObjectAliasTable {
  project_id: string;
  object_id: string;
  alias: string;
  digest: string;
  created_at: Generated<Date>;
}

/** Content-addressed table rows, shared by every table of a project that holds the same row. */
export interface TableRowTable {
  project_id: string;
  digest: string;
  val: Jsonb;
}

/** A table is the ordered list of its row digests (duplicates allowed). */
export interface TableTable {
  project_id: string;
  digest: string;
  row_digests: ColumnType<string[], string[], string[]>;
  created_at: Generated<Date>;
}

/** Content-addressed file bytes. */
export interface FileTable {
  project_id: string;
  digest: string;
  /** The upload's filename at first upload. */
  name: string;
  content: Buffer;
  size_bytes: number;
  created_at: Generated<Date>;
}

/** Feedback on any ref of the project (reference §2.7); `payload` is the normalised payload. */
export interface FeedbackTable {
  project_id: string;
  id: string;
  weave_ref: string;
  wb_user_id: string;
  creator: string | null;
  created_at: Timestamp;
  feedback_type: string;
  payload: Jsonb;
  annotation_ref: string | null;
  runnable_ref: string | null;
  call_ref: string | null;
  trigger_ref: string | null;
  queue_id: string | null;
  /** Whether the payload may hold numbers a double would change (tracing/exact-numbers.ts): read as text when it may. */
  exact_numbers: ColumnType<boolean, boolean | undefined, boolean>;
}

/**
 * LLM prices per token (reference §2.8): `default` rows (pricing_level_id 'default', seeded by the
 * migration) and `project` rows (pricing_level_id = the project id) made with /cost/create.
 */
export interface LlmPriceTable {
  id: string;
  pricing_level: 'default' | 'project';
  pricing_level_id: string;
  provider_id: string;
  llm_id: string;
  effective_date: Timestamp;
  prompt_token_cost: number;
  completion_token_cost: number;
  prompt_token_cost_unit: string;
  completion_token_cost_unit: string;
  created_by: string;
  created_at: Generated<Date>;
}

export interface TracingTables {
  trace_feedback: FeedbackTable;
  trace_llm_prices: LlmPriceTable;
  trace_calls: CallTable;
  trace_objects: ObjectVersionTable;
  trace_object_tags: ObjectTagTable;
  trace_object_aliases: ObjectAliasTable;
  trace_table_rows: TableRowTable;
  trace_tables: TableTable;
  trace_files: FileTable;
}
