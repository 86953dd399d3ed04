import type { ColumnType, Generated } from 'kysely';

/** An identity column: generated on insert, never written. */
type Identity = ColumnType<number, never, never>;
type CreatedAt = ColumnType<Date, never, never>;
type UpdatedAt = ColumnType<Date, never, Date>;

export interface WandbRunTable {
  id: Identity;
  entity: string;
  project: string;
  name: string;
  display_name: string | null;
  job_type: string | null;
  /** W&B's config JSON string, `{"key": {"value": ...}, "_wandb": {"value": {...}}}`. */
  config: string | null;
  /** The last `wandb-summary.json` line the SDK streamed (a JSON object as text). */
  summary: string | null;
  /** wandb.init's tags, notes and group (`groupName`), as last set. */
  tags: Generated<string[]>;
  notes: ColumnType<string | null, string | null | undefined, string | null>;
  group_name: ColumnType<string | null, string | null | undefined, string | null>;
  history_line_count: Generated<number>;
  exitcode: number | null;
  completed_at: Date | null;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface WandbRunHistoryTable {
  run_id: number;
  line: number;
  content: string;
}

export interface WandbRunFileTable {
  run_id: number;
  name: string;
  upload_token: string;
  md5: string | null;
  /** When the upload URL stops taking bytes: a day after createRunFiles last handed it out. */
  upload_expires_at: ColumnType<Date, Date | string | undefined, Date | string>;
}

export interface WandbBlobTable {
  entity: string;
  /** Hex MD5 of `data`. */
  md5: string;
  size: number;
  data: Uint8Array;
}

export interface WandbCollectionTable {
  id: Identity;
  entity: string;
  project: string;
  name: string;
  type: string;
  created_at: CreatedAt;
}

export type WandbArtifactState = 'PENDING' | 'COMMITTED';

export interface WandbArtifactTable {
  id: Identity;
  collection_id: number;
  /** Assigned at commit (`vN`); null while PENDING. */
  version_index: number | null;
  state: WandbArtifactState;
  /** The manifest digest the client computed (the dedup key). */
  digest: string;
  description: string | null;
  metadata: string | null;
  run_name: string | null;
  storage_region: string | null;
  pending_aliases: Generated<string[]>;
  /** The version's tags (W&B's artifact tags: names only; a tag's category and attributes are not kept). */
  tags: Generated<string[]>;
  /** The capability in the manifest's upload and download URLs. */
  manifest_token: string;
  /** Hex MD5 of the uploaded manifest (its bytes are a blob); null until uploaded. */
  manifest_md5: string | null;
  /** Base64 MD5 the client announced for the manifest. */
  manifest_expected_md5: string | null;
  size: Generated<number>;
  file_count: Generated<number>;
  /** Set for a checkpoint's `lora` artifact: its files are read from the checkpoint's directory, not from blobs. */
  checkpoint_id: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface WandbArtifactFileTable {
  artifact_id: number;
  name: string;
  /** Base64 MD5, as the SDK and the manifest write it. */
  md5: string;
  /** Null until the manifest gives it (at commit). */
  size: number | null;
  birth_artifact_id: number;
  /** The capability in the file's upload and download URLs. */
  token: string;
  /** For a checkpoint's file: "<size>:<mtime ms>" when its MD5 was taken. */
  stat: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface WandbAliasTable {
  collection_id: number;
  alias: string;
  artifact_id: number;
}

export interface WandbTables {
  wandb_runs: WandbRunTable;
  wandb_run_history: WandbRunHistoryTable;
  wandb_run_files: WandbRunFileTable;
  wandb_blobs: WandbBlobTable;
  wandb_collections: WandbCollectionTable;
  wandb_artifacts: WandbArtifactTable;
  wandb_artifact_files: WandbArtifactFileTable;
  wandb_aliases: WandbAliasTable;
}
