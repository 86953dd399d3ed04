import { z } from 'zod';
import { AnyJson, Key, KeyList, StoredJson, Limit, Offset, ProjectId, SortByList, TRACING_LIMITS } from './common.js';

/** Tables (reference §2.4). Row values are checked to be objects by the service (400, not 422). */

export const TableCreateBody = z.object({
  table: z.object({
    project_id: ProjectId,
    rows: z.array(StoredJson).max(TRACING_LIMITS.tableRows),
    expected_digest: Key.nullish(),
  }),
});
export const TableCreateResponse = z.object({ digest: z.string(), row_digests: z.array(z.string()) });

const Row = StoredJson.describe('a JSON object');
export const TableUpdateSpec = z.union([
  z.object({ append: z.object({ row: Row }) }),
  z.object({ pop: z.object({ index: z.number().int() }) }),
  z.object({ insert: z.object({ index: z.number().int(), row: Row }) }),
]);
export const TableUpdateBody = z.object({
  project_id: ProjectId,
  base_digest: Key,
  updates: z.array(TableUpdateSpec).max(TRACING_LIMITS.batchItems),
});
export const TableUpdateResponse = z.object({ digest: z.string(), updated_row_digests: z.array(z.string()) });

export const TableQueryBody = z.object({
  project_id: ProjectId,
  digest: Key,
  filter: z.object({ row_digests: KeyList.nullish() }).nullish(),
  limit: Limit,
  offset: Offset,
  sort_by: SortByList.nullish().describe('Dotted paths into the row value.'),
});
export const TableRow = z.object({ digest: z.string(), val: AnyJson, original_index: z.number() });
export const TableQueryResponse = z.object({ rows: z.array(TableRow) });

export const TableQueryStatsBody = z.object({ project_id: ProjectId, digest: Key });
export const TableQueryStatsResponse = z.object({ count: z.number() });

export const TableQueryStatsBatchBody = z.object({
  project_id: ProjectId,
  digests: KeyList.nullish(),
  include_storage_size: z.boolean().nullish(),
});
export const TableQueryStatsBatchResponse = z.object({
  tables: z.array(z.object({ digest: z.string(), count: z.number(), storage_size_bytes: z.number().optional() })),
});

export const TableCreateFromDigestsBody = z.object({
  project_id: ProjectId,
  row_digests: z.array(Key).max(TRACING_LIMITS.tableRows),
  expected_digest: Key.nullish(),
});
export const TableCreateFromDigestsResponse = z.object({ digest: z.string() });

