import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../../db/index.js';
import { InvalidRequestError } from '../../errors.js';

/** Every tracing repository function takes the executor: the database or a transaction. */
export type Executor = Kysely<Database>;

/**
 * A timestamp column as ISO-8601 text with microseconds and `Z`: reading it as a Date would drop the
 * microseconds Python clients send.
 */
export function isoText(ref: RawBuilder<unknown> | ReturnType<typeof sql.ref>): RawBuilder<string | null> {
  return sql<string | null>`to_char(${ref} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** JSON text cast to jsonb; null stays SQL null. */
export function jsonbText(text: string | null): RawBuilder<unknown> {
  return sql`${text}::jsonb`;
}

/**
 * PostgreSQL's JSONB cannot hold U+0000 in a string (SQLSTATE 22P05). Such payloads are refused with
 * a 400 that says so, instead of a 500 (docs/tracing.md, "NUL characters").
 */
export async function mapJsonbErrors<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (isPgError(error, '22P05')) {
      throw new InvalidRequestError(
        'A string in the payload contains a NUL character (\\u0000), which PostgreSQL JSONB cannot store. Remove or replace it and resend.',
        { code: 'nul_character' },
      );
    }
    throw error;
  }
}

export function isPgError(error: unknown, code: string): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

/** count(*) and int8 come back as strings from pg and numbers from PGlite. */
export const toInt = (value: unknown): number => Number(value ?? 0);
