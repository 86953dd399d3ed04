import { ConflictError, InvalidRequestError, NotFoundError } from '../../errors.js';
import { rowDigest, tableDigest } from '../digest.js';
import { storedJsonText, type LosslessJson } from '../json.js';
import { mapJsonbErrors } from '../repositories/common.js';
import * as repo from '../repositories/tables.js';
import type { TracingDeps } from './deps.js';

/** Tables: ordered lists of content-addressed rows (reference §2.4, §3.2). */

export const TABLE_STREAM_BATCH_SIZE = 500;

interface PreparedRow {
  digest: string;
  val: string;
}

function prepareRow(row: LosslessJson, where: string): PreparedRow {
  if (row === null || typeof row !== 'object' || Array.isArray(row) || 'isLosslessNumber' in row) {
    throw new InvalidRequestError(`${where}: every table row must be a JSON object.`, { code: 'invalid_row' });
  }
  return { digest: rowDigest(row), val: storedJsonText(row) };
}

function checkExpected(expected: string | null | undefined, digest: string): void {
  if (expected && expected !== digest) {
    throw new ConflictError(`Digest mismatch: expected ${expected}, computed ${digest}.`, { code: 'digest_mismatch' });
  }
}

export async function createTable(
  deps: TracingDeps,
  args: { projectId: string; rows: LosslessJson[]; expectedDigest?: string | null },
): Promise<{ digest: string; row_digests: string[] }> {
  const rows = args.rows.map((row, i) => prepareRow(row, `rows[${i}]`));
  const rowDigests = rows.map((r) => r.digest);
  const digest = tableDigest(rowDigests);
  checkExpected(args.expectedDigest, digest);
  await mapJsonbErrors(() =>
    deps.db.transaction().execute(async (trx) => {
      await repo.insertRows(trx, { projectId: args.projectId, rows });
      await repo.insertTable(trx, { projectId: args.projectId, digest, rowDigests });
    }),
  );
  return { digest, row_digests: rowDigests };
}

export type TableUpdate =
  | { append: { row: LosslessJson } }
  | { pop: { index: number } }
  | { insert: { index: number; row: LosslessJson } };

/**
 * Applies append/pop/insert in order to the base table's rows and stores the result as a new table;
 * `updated_row_digests` lists the row each update appended, popped or inserted, in update order.
 */
export async function updateTable(
  deps: TracingDeps,
  args: { projectId: string; baseDigest: string; updates: TableUpdate[] },
): Promise<{ digest: string; updated_row_digests: string[] }> {
  const base = await repo.readTableDigests(deps.db, { projectId: args.projectId, digest: args.baseDigest });
  if (!base) throw new NotFoundError('table', undefined, { message: `Table ${args.baseDigest} not found` });
  const digests = [...base];
  const added: PreparedRow[] = [];
  // The digests each update touched, in update order: appended, popped and inserted rows (weave's answer).
  const touched: string[] = [];
  args.updates.forEach((update, i) => {
    if ('append' in update) {
      const row = prepareRow(update.append.row, `updates[${i}].append.row`);
      digests.push(row.digest);
      added.push(row);
      touched.push(row.digest);
    } else if ('pop' in update) {
      const { index } = update.pop;
      if (!Number.isInteger(index) || index < 0 || index >= digests.length) {
        throw new InvalidRequestError(`updates[${i}].pop: index ${index} is out of range for a table of ${digests.length} rows.`, { code: 'index_out_of_range' });
      }
      touched.push(...digests.splice(index, 1));
    } else {
      const { index } = update.insert;
      if (!Number.isInteger(index) || index < 0 || index > digests.length) {
        throw new InvalidRequestError(`updates[${i}].insert: index ${index} is out of range for a table of ${digests.length} rows.`, { code: 'index_out_of_range' });
      }
      const row = prepareRow(update.insert.row, `updates[${i}].insert.row`);
      digests.splice(index, 0, row.digest);
      added.push(row);
      touched.push(row.digest);
    }
  });
  const digest = tableDigest(digests);
  await mapJsonbErrors(() =>
    deps.db.transaction().execute(async (trx) => {
      await repo.insertRows(trx, { projectId: args.projectId, rows: added });
      await repo.insertTable(trx, { projectId: args.projectId, digest, rowDigests: digests });
    }),
  );
  return { digest, updated_row_digests: touched };
}

/** A table made of rows already stored in the project (newest Python, large tables). */
export async function createTableFromDigests(
  deps: TracingDeps,
  args: { projectId: string; rowDigests: string[]; expectedDigest?: string | null },
): Promise<{ digest: string }> {
  const digest = tableDigest(args.rowDigests);
  checkExpected(args.expectedDigest, digest);
  await deps.db.transaction().execute(async (trx) => {
    const stored = await repo.storedRowDigests(trx, { projectId: args.projectId, digests: args.rowDigests });
    const missing = [...new Set(args.rowDigests)].filter((d) => !stored.has(d));
    if (missing.length) {
      const shown = missing.slice(0, 5).join(', ') + (missing.length > 5 ? ` and ${missing.length - 5} more` : '');
      throw new NotFoundError('row', undefined, { message: `Row digests not found in ${args.projectId}: ${shown}` });
    }
    await repo.insertTable(trx, { projectId: args.projectId, digest, rowDigests: args.rowDigests });
  });
  return { digest };
}

export async function queryTable(deps: TracingDeps, q: repo.TableRowsQuery): Promise<repo.TableRowOut[]> {
  return repo.queryRows(deps.db, q);
}

/** The rows of a table query in LIMIT/OFFSET windows, each read only when the consumer asks for it. */
export async function* streamTable(deps: TracingDeps, q: repo.TableRowsQuery): AsyncGenerator<repo.TableRowOut[]> {
  repo.tableRowsQuery(q); // validates the sort before the first read
  const start = q.offset ?? 0;
  const end = q.limit == null ? Infinity : start + q.limit;
  for (let offset = start; offset < end; offset += TABLE_STREAM_BATCH_SIZE) {
    const limit = Math.min(TABLE_STREAM_BATCH_SIZE, end - offset);
    const rows = await repo.queryRows(deps.db, q, { limit, offset });
    if (rows.length > 0) yield rows;
    if (rows.length < limit) return;
  }
}

export async function tableStats(deps: TracingDeps, args: { projectId: string; digest: string }): Promise<{ count: number }> {
  const [stats] = await repo.tableStats(deps.db, { projectId: args.projectId, digests: [args.digest] });
  return { count: stats?.count ?? 0 };
}

/** Counts (and sizes) of several tables; unknown digests are left out. */
export async function tableStatsBatch(
  deps: TracingDeps,
  args: { projectId: string; digests: string[]; storageSize?: boolean },
): Promise<{ digest: string; count: number; storage_size_bytes?: number }[]> {
  const stats = await repo.tableStats(deps.db, args);
  const byDigest = new Map(stats.map((s) => [s.digest, s]));
  return [...new Set(args.digests)].flatMap((d) => (byDigest.has(d) ? [byDigest.get(d)!] : []));
}
