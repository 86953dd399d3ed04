import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../../db/schema.js';
import type { JsonbValue } from '../tables.js';
import type { PageOf } from '../schemas.js';

/** The executor every training repository function takes: the database or a transaction of it. */
export type TrainingDb = Kysely<Database>;

/** A JSONB parameter; the pg driver would send a JS array as a Postgres array. */
export function jsonb<T>(value: T): RawBuilder<JsonbValue<T>> {
  return jsonbText<T>(JSON.stringify(value));
}

/** The same for a value already serialised (bulk inserts measure the text to size their statements). */
export function jsonbText<T>(json: string): RawBuilder<JsonbValue<T>> {
  return sql<JsonbValue<T>>`${json}::jsonb`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids arrive from paths and cursors; a non-UUID would make Postgres raise instead of finding nothing. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/** Scopes: the entities the caller's key reaches. An empty list reaches nothing. */
export interface EntityScope {
  entityIds: readonly string[];
}

export function iso(date: Date): string;
export function iso(date: Date | null): string | null;
export function iso(date: Date | null): string | null {
  return date === null ? null : date.toISOString();
}

/**
 * Builds a page from `limit + 1` fetched rows: the extra row only says whether there is more.
 * Past the end the page is empty with empty ids, which is how the ART client's auto-pagination stops.
 */
export function toPage<T extends { id: string }>(rows: T[], limit: number): PageOf<T> {
  const data = rows.slice(0, limit);
  return {
    object: 'list',
    data,
    first_id: data[0]?.id ?? '',
    last_id: data[data.length - 1]?.id ?? '',
    has_more: rows.length > limit,
  };
}

/** Multi-row inserts are cut by rows and by bytes, to stay under Postgres' 65,535 parameters and keep statements sane. */
export function chunkBySize<T>(items: readonly T[], size: (item: T) => number, maxRows = 1000, maxBytes = 8 * 1024 * 1024): T[][] {
  const chunks: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const itemBytes = size(item);
    if (current.length > 0 && (current.length >= maxRows || bytes + itemBytes > maxBytes)) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += itemBytes;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

/** The advisory lock every claim holds until its transaction ends (an arbitrary constant of trainyard's). */
const CLAIM_LOCK_KEY = 7_310_512_023;

/**
 * Holds the claim lock until the transaction ends: claims serialize on it (repository/jobs.ts), an import
 * takes it so that no job starts toward the step it registers, and checkpoint deletes (Delete Model
 * Checkpoints, retention) take it so that no job starts from a checkpoint they are deleting.
 */
export async function lockClaims(db: TrainingDb): Promise<void> {
  await sql`select pg_advisory_xact_lock(${CLAIM_LOCK_KEY})`.execute(db);
}
