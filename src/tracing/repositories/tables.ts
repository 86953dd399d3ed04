import { sql, type RawBuilder } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { parseStoredJson } from '../json.js';
import { splitFieldPath } from '../query/expr.js';
import { sortExprs } from '../query/values.js';
import { jsonbText, toInt, type Executor } from './common.js';

/** trace_tables (ordered row digests) and trace_table_rows (content-addressed row values). */

const ROWS_PER_STATEMENT = 5000;

/** Stores rows that are not stored yet; rows are shared by every table of the project holding them. */
export async function insertRows(trx: Executor, args: { projectId: string; rows: readonly { digest: string; val: string }[] }): Promise<void> {
  const unique = new Map(args.rows.map((row) => [row.digest, row.val]));
  const all = [...unique];
  for (let i = 0; i < all.length; i += ROWS_PER_STATEMENT) {
    const chunk = all.slice(i, i + ROWS_PER_STATEMENT);
    await trx
      .insertInto('trace_table_rows')
      .values(chunk.map(([digest, val]) => ({ project_id: args.projectId, digest, val: jsonbText(val) as never })))
      .onConflict((oc) => oc.columns(['project_id', 'digest']).doNothing())
      .execute();
  }
}

export async function insertTable(trx: Executor, args: { projectId: string; digest: string; rowDigests: readonly string[] }): Promise<void> {
  await trx
    .insertInto('trace_tables')
    .values({ project_id: args.projectId, digest: args.digest, row_digests: [...args.rowDigests] })
    .onConflict((oc) => oc.columns(['project_id', 'digest']).doNothing())
    .execute();
}

export async function readTableDigests(db: Executor, args: { projectId: string; digest: string }): Promise<string[] | undefined> {
  const row = await db
    .selectFrom('trace_tables')
    .select('row_digests')
    .where('project_id', '=', args.projectId)
    .where('digest', '=', args.digest)
    .executeTakeFirst();
  return row?.row_digests;
}

/** Which of the digests are stored rows of the project. */
export async function storedRowDigests(db: Executor, args: { projectId: string; digests: readonly string[] }): Promise<Set<string>> {
  const unique = [...new Set(args.digests)];
  const found = new Set<string>();
  for (let i = 0; i < unique.length; i += ROWS_PER_STATEMENT) {
    const rows = await db
      .selectFrom('trace_table_rows')
      .select('digest')
      .where('project_id', '=', args.projectId)
      .where('digest', 'in', unique.slice(i, i + ROWS_PER_STATEMENT))
      .execute();
    for (const row of rows) found.add(row.digest);
  }
  return found;
}

export async function readRow(db: Executor, args: { projectId: string; digest: string }): Promise<{ val: unknown } | undefined> {
  const row = await db
    .selectFrom('trace_table_rows')
    .select(sql<string>`val::text`.as('val'))
    .where('project_id', '=', args.projectId)
    .where('digest', '=', args.digest)
    .executeTakeFirst();
  return row && { val: parseStoredJson(row.val) };
}

export interface TableRowsQuery {
  projectId: string;
  digest: string;
  rowDigests?: readonly string[] | null;
  sortBy?: readonly { field: string; direction: string }[] | null;
  limit?: number | null;
  offset?: number | null;
}

export interface TableRowOut {
  digest: string;
  val: unknown;
  original_index: number;
}

const MAX_SEGMENTS = 32;
const INT32_MAX = 2 ** 31 - 1;

/** A dotted path into the row value as sort keys: numeric value, then text, missing last (like calls). */
function sortKeys(field: string, direction: string): RawBuilder<unknown>[] {
  if (direction !== 'asc' && direction !== 'desc') {
    throw new InvalidRequestError(`Invalid sort direction ${JSON.stringify(direction)}: expected asc or desc`, { code: 'invalid_sort' });
  }
  const segments = splitFieldPath(field);
  if (segments.length > MAX_SEGMENTS || segments.some((s) => s.length === 0 || s.length > 256 || /[\u0000-\u001f\u007f]/.test(s))) {
    throw new InvalidRequestError(`Invalid sort field ${JSON.stringify(field)}: expected a dotted path into the row`, { code: 'invalid_sort' });
  }
  const json = sql`jsonb_extract_path(r.val, ${sql.join(segments.map((s) => sql`${s}::text`))})`;
  const dir = sql.raw(direction);
  return sortExprs({ kind: 'json', sql: json }).map((expr) => sql`${expr} ${dir} nulls last`);
}

/**
 * The rows of a table in insertion order (or sorted), duplicates kept, each with its position. A page of
 * the rows in insertion order, as weave's SDK reads a dataset (pages of 100 by offset), is a slice of the
 * table's row list, so only its own rows are read; sorted or filtered, every row is read for each page.
 */
export function tableRowsQuery(q: TableRowsQuery, window?: { limit: number; offset: number }): RawBuilder<TableRowOut> {
  const limit = window ? window.limit : q.limit;
  const offset = window ? window.offset : q.offset;
  if (!q.sortBy?.length && !q.rowDigests?.length) {
    // Array subscripts are 32-bit; no table has that many rows, so a larger bound reads to the end.
    const from = Math.min((offset ?? 0) + 1, INT32_MAX);
    const slice = limit != null ? sql`t.row_digests[${from}::int:${Math.min(from + limit - 1, INT32_MAX)}::int]` : sql`t.row_digests[${from}::int:]`;
    // Each row by primary key: a subquery in the select list is never made a join, which a planner
    // without statistics would make a scan of all the project's rows. OFFSET 0 keeps it run once a row.
    return sql<TableRowOut>`select digest, val, original_index from (
        select e.digest, e.ord, (e.ord + ${from - 2}::int)::int as original_index,
          (select r.val::text from trace_table_rows r where r.project_id = t.project_id and r.digest = e.digest) as val
        from trace_tables t
        cross join lateral unnest(${slice}) with ordinality as e(digest, ord)
        where t.project_id = ${q.projectId} and t.digest = ${q.digest}
        offset 0) page
      where val is not null
      order by ord asc`;
  }
  const conditions = [sql`t.project_id = ${q.projectId}`, sql`t.digest = ${q.digest}`];
  if (q.rowDigests?.length) conditions.push(sql`e.digest in (${sql.join(q.rowDigests)})`);
  const order = (q.sortBy ?? []).flatMap((s) => sortKeys(s.field, s.direction));
  order.push(sql`e.ord asc`);
  return sql<TableRowOut>`select e.digest, r.val::text as val, (e.ord - 1)::int as original_index
    from trace_tables t
    cross join lateral unnest(t.row_digests) with ordinality as e(digest, ord)
    join trace_table_rows r on r.project_id = t.project_id and r.digest = e.digest
    where ${sql.join(conditions, sql` and `)}
    order by ${sql.join(order)}
    ${limit != null ? sql`limit ${limit}` : sql``} ${offset ? sql`offset ${offset}` : sql``}`;
}

export async function queryRows(db: Executor, q: TableRowsQuery, window?: { limit: number; offset: number }): Promise<TableRowOut[]> {
  const { rows } = await tableRowsQuery(q, window).execute(db);
  return rows.map((row) => ({ ...row, val: parseStoredJson(row.val as string), original_index: toInt(row.original_index) }));
}

export async function tableStats(
  db: Executor,
  args: { projectId: string; digests: readonly string[]; storageSize?: boolean },
): Promise<{ digest: string; count: number; storage_size_bytes?: number }[]> {
  if (args.digests.length === 0) return [];
  const size = args.storageSize
    ? sql`, (select coalesce(sum(octet_length(r.val::text)), 0) from unnest(t.row_digests) e(digest)
        join trace_table_rows r on r.project_id = t.project_id and r.digest = e.digest) as storage_size_bytes`
    : sql``;
  const { rows } = await sql<{ digest: string; count: unknown; storage_size_bytes?: unknown }>`
    select t.digest, coalesce(cardinality(t.row_digests), 0) as count ${size}
    from trace_tables t where t.project_id = ${args.projectId} and t.digest in (${sql.join(args.digests)})`.execute(db);
  return rows.map((r) => ({
    digest: r.digest,
    count: toInt(r.count),
    ...(args.storageSize ? { storage_size_bytes: toInt(r.storage_size_bytes) } : {}),
  }));
}
