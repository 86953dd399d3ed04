import type { ColumnType, Generated } from 'kysely';

/** An identity column: generated on insert, never written. */
type Identity = ColumnType<number, never, never>;

export type UsageOutcome = 'success' | 'error' | 'client_disconnected';

/**
 * One row per chat completion that reached routing. Projects are stored by name (`entity`, `project`)
 * as clients name them in `Compat-Project`, so recording costs no lookup on the hot path.
 */
export interface UsageRecordTable {
  id: Generated<Identity>;
  created_at: ColumnType<Date, Date | string, never>;
  entity: string;
  project: string;
  api_key_id: string;
  request_id: string;
  /** The model id the client sent. */
  model: string;
  base_model: string | null;
  /** `entity/project/name` of a trained model, when the request named one. */
  trained_model: string | null;
  checkpoint_step: number | null;
  backend: string | null;
  stream: boolean;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  /** The counts are estimates: the stream ended before the engine's usage chunk. */
  estimated: boolean;
  latency_ms: number;
  time_to_first_token_ms: number | null;
  outcome: UsageOutcome;
  status: number;
  error_code: string | null;
}

export interface InferenceTables {
  usage_records: UsageRecordTable;
}
