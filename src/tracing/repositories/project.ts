import { sql } from 'kysely';
import { size } from './calls.js';
import { toInt, type Executor } from './common.js';

/** Storage sizes of one project, in bytes: JSON text of live calls, objects and table rows; file contents. */

export type StorageKind = 'trace' | 'objects' | 'tables' | 'files';

export async function storageSizes(db: Executor, args: { projectId: string; kinds: ReadonlySet<StorageKind> }): Promise<Record<StorageKind, number>> {
  const { projectId, kinds } = args;
  const part = (kind: StorageKind, query: ReturnType<typeof sql>) => (kinds.has(kind) ? sql`(${query})` : sql`0`);
  const { rows } = await sql<Record<StorageKind, unknown>>`select
    ${part('trace', sql`select coalesce(sum(${size('c')}), 0) from trace_calls c where c.project_id = ${projectId} and c.deleted_at is null`)} as trace,
    ${part('objects', sql`select coalesce(sum(octet_length(o.val::text)), 0) from trace_objects o where o.project_id = ${projectId} and o.deleted_at is null`)} as objects,
    ${part('tables', sql`select coalesce(sum(octet_length(r.val::text)), 0) from trace_table_rows r where r.project_id = ${projectId}`)} as tables,
    ${part('files', sql`select coalesce(sum(f.size_bytes), 0) from trace_files f where f.project_id = ${projectId}`)} as files`.execute(db);
  const row = rows[0];
  return { trace: toInt(row.trace), objects: toInt(row.objects), tables: toInt(row.tables), files: toInt(row.files) };
}
