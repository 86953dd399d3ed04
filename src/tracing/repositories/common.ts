import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../../db/index.js';
import { isRefusedValue, sqlState } from '../../db/refusals.js';
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

/** JSON text cast to json, for columns that are stored and returned but never queried. */
export function jsonText(text: string | null): RawBuilder<unknown> {
  return sql`${text}::json`;
}

export const NUL_REASON =
  'A string in the payload contains a NUL character (\\u0000), which PostgreSQL JSONB cannot store. Remove or replace it and resend.';

/**
 * A database data exception (SQLSTATE class 22, or 54000) caused by a value of the request, as the
 * tracing API's 400 `{"reason"}` (reference status table) rather than the app-wide 422 backstop:
 * NUL characters (22P05 in JSONB, 22021 in text), lone surrogates and other malformed text (22P02),
 * out-of-range numbers and dates (22003, 22008, 22007). Undefined for any other error.
 */
export function tracingValueError(error: unknown): InvalidRequestError | undefined {
  const code = sqlState(error);
  if (code === undefined) return undefined;
  switch (code) {
    case '22P05':
    case '22021':
      return new InvalidRequestError(NUL_REASON, { code: 'nul_character' });
    case '22P02':
      return new InvalidRequestError(
        'A value in the request is not valid text for PostgreSQL (for example a string with an unpaired UTF-16 surrogate such as \\ud800). Fix it and resend.',
        { code: 'invalid_text' },
      );
    case '22003':
      return new InvalidRequestError('A number in the request is out of the range PostgreSQL accepts.', { code: 'value_out_of_range' });
    case '22007':
    case '22008':
      return new InvalidRequestError('A date or time in the request is not one PostgreSQL accepts (invalid or out of range).', { code: 'invalid_datetime' });
    default:
      if (isRefusedValue(error)) {
        return new InvalidRequestError(`A value in the request is out of the range or form PostgreSQL accepts (SQLSTATE ${code}).`, { code: 'invalid_value' });
      }
      return undefined;
  }
}

/**
 * PostgreSQL's JSONB cannot hold U+0000 in a string (SQLSTATE 22P05). Such payloads are refused with
 * a 400 that says so, instead of a 500 (docs/tracing.md, "NUL characters"); so is any other value the
 * database refuses (`tracingValueError`).
 */
export async function mapJsonbErrors<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw tracingValueError(error) ?? error;
  }
}

export function isPgError(error: unknown, code: string): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

/** count(*) and int8 come back as strings from pg and numbers from PGlite. */
export const toInt = (value: unknown): number => Number(value ?? 0);
