import { sql, type RawBuilder } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { unmarkNumbers } from '../../http/exact-numbers.js';
import { ExactNumber } from '../exact-numbers.js';
import type { JsonValue } from '../json.js';
import { shortText } from '../sanitize.js';
import { isValidIsoDateTime } from '../schemas/common.js';

/**
 * Typed SQL values and the conversions between them. Operands of the query language compile to one of
 * these, and a comparison converts both sides to one type first. Literals are always bind parameters.
 */

export type SqlType = 'text' | 'numeric' | 'bool' | 'timestamptz';

/** A `$literal`'s value: JSON, integers beyond 2^53 exact (tracing/exact-numbers.ts). */
export type LiteralValue = JsonValue | ExactNumber;

export type Value =
  /** A `$literal`: bound only once the comparison has chosen its type. */
  | { kind: 'literal'; value: LiteralValue }
  /** A JSONB value at a path (SQL null when the path is missing, JSON `null` when set to null). */
  | { kind: 'json'; sql: RawBuilder<unknown> }
  /** A column, a derived field, a conversion or an operation. */
  | { kind: 'typed'; type: SqlType; sql: RawBuilder<unknown> };

/** What a field resolves to: never a literal. */
export type FieldValue = Exclude<Value, { kind: 'literal' }>;

// No backslashes in these patterns: kysely's `sql` tag reads cooked template strings.
/**
 * What text reads as a number. Digits are bounded (200 on each side of a point, 400 without one or
 * before a fraction of zeros, the form a whole float up to 1.8e308 is stored in: tracing/exact-numbers.ts;
 * PostgreSQL's regex repeats go to 255): numeric holds 131,072 digits before the point, so one huge
 * stored digit string would otherwise fail every query that casts that path. Longer digit runs read as
 * "not a number".
 */
const NUMBER_PATTERN = `'^ *[-+]?([0-9]{1,200}[.]?[0-9]{0,200}|[0-9]{1,200}[0-9]{0,200}[.]0{1,200}|[.][0-9]{1,200})([eE][-+]?[0-9]{1,3})? *$'`;
/**
 * NUMBER_PATTERN without the bounds. The bounded repeats make PostgreSQL's regex engine slow (20 to
 * 25 µs a row against 1 to 2 µs for this one, on PostgreSQL 15 and PGlite), so text is tested against
 * this shape first and against the bounds only when it is long enough to break them.
 */
const NUMBER_SHAPE = `'^ *[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,3})? *$'`;
/** 9999-12-31T23:59:59Z, and as far before 1970. */
const MAX_UNIX_SECONDS = 253402300799;

/** The type a literal compares as: a bool literal compares as bool, a number as a number (reference §3.8). */
export function literalType(value: LiteralValue): SqlType | null {
  if (value === null) return null;
  if (value instanceof ExactNumber) return 'numeric';
  switch (typeof value) {
    case 'string':
      return 'text';
    case 'number':
      return 'numeric';
    case 'boolean':
      return 'bool';
    default:
      throw new InvalidRequestError('Lists and objects can only be literals inside $in', { code: 'invalid_query' });
  }
}

/** The JSON value as a scalar string, as ClickHouse's JSON_VALUE gives it: missing or null reads as ''. */
function jsonText(json: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`coalesce(${json} #>> '{}', '')`;
}

/** A number from text, or null when the text is not one (a bad cast must not fail the whole query). */
function textToNumeric(text: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(case when ${text} ~ ${sql.raw(NUMBER_SHAPE)} and ${withinDigitBounds(text)} then (${text})::numeric end)`;
}

/**
 * Whether number-shaped text keeps to NUMBER_PATTERN's bounds: text of at most 200 characters has no
 * digit run over 200, so only longer text pays for the bounded pattern.
 */
function withinDigitBounds(text: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(length(${text}) <= 200 or ${text} ~ ${sql.raw(NUMBER_PATTERN)})`;
}

/**
 * A number from a JSONB value: a JSON number, or a string that reads as one; null for anything else,
 * as when its scalar text (jsonText) goes through textToNumeric. A JSON number's text is always
 * number-shaped and casts back to the same numeric, so it skips the shape test and casts directly.
 */
function jsonToNumeric(json: RawBuilder<unknown>): RawBuilder<unknown> {
  const text = sql`(${json} #>> '{}')`;
  return sql`(case jsonb_typeof(${json})
    when 'number' then (case when ${withinDigitBounds(text)} then (${json})::numeric end)
    when 'string' then ${textToNumeric(text)} end)`;
}

function textToBool(text: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(case lower(${text}) when 'true' then true when 'false' then false end)`;
}

export function toType(value: Value, type: SqlType): RawBuilder<unknown> {
  switch (value.kind) {
    case 'literal':
      return bindLiteral(value.value, type);
    case 'json':
      return type === 'numeric' ? jsonToNumeric(value.sql) : convertTyped(jsonText(value.sql), 'text', type);
    case 'typed':
      return convertTyped(value.sql, value.type, type);
  }
}

function convertTyped(expr: RawBuilder<unknown>, from: SqlType, to: SqlType): RawBuilder<unknown> {
  if (from === to) return expr;
  switch (`${from}->${to}`) {
    case 'text->numeric':
      return textToNumeric(expr);
    case 'text->bool':
      return textToBool(expr);
    case 'numeric->text':
    case 'bool->text':
      return sql`(${expr})::text`;
    case 'numeric->bool':
      return sql`((${expr}) <> 0)`;
    case 'bool->numeric':
      return sql`(${expr})::int`;
    case 'timestamptz->numeric':
      return sql`extract(epoch from ${expr})`;
    case 'timestamptz->text':
      return sql`to_char(${expr} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
    case 'numeric->timestamptz':
      return sql`to_timestamp((${expr})::double precision)`;
    default:
      throw new InvalidRequestError(`Cannot compare a ${from} value as ${to}`, { code: 'invalid_query' });
  }
}

function bindLiteral(value: LiteralValue, type: SqlType): RawBuilder<unknown> {
  if (value === null) return sql`null`;
  if (value instanceof ExactNumber) {
    // Its digits, cast by PostgreSQL: numeric holds them exactly.
    if (type === 'numeric') return sql`${value.value}::numeric`;
    if (type === 'text') return sql`${value.value}::text`;
    // As a number beyond the range of unix seconds, and as any number compared as a bool.
    throw new InvalidRequestError(`Literal ${shown(value.value)} cannot be compared as ${type}`, { code: 'invalid_query' });
  }
  switch (type) {
    case 'text':
      if (typeof value === 'object') break;
      return sql`${String(value)}::text`;
    case 'numeric':
      if (typeof value === 'boolean') return sql`${value ? 1 : 0}::numeric`;
      if (typeof value === 'number') return sql`${value}::numeric`;
      break;
    case 'bool':
      if (typeof value === 'boolean') return sql`${value}::boolean`;
      break;
    case 'timestamptz':
      // Numbers compared with a datetime column are unix seconds (reference §3.8).
      // Unix seconds within PostgreSQL's timestamptz range (years 1..9999 as ISO text); beyond: 400.
      if (typeof value === 'number' && Math.abs(value) <= MAX_UNIX_SECONDS) return sql`to_timestamp(${value}::double precision)`;
      if (typeof value === 'string' && isValidIsoDateTime(value, { dateOnly: true })) return sql`${value}::timestamptz`;
      break;
  }
  throw new InvalidRequestError(`Literal ${shown(unmarkNumbers(JSON.stringify(value)))} cannot be compared as ${type}`, { code: 'invalid_query' });
}

/** Characters of a literal's text a message shows: a literal may hold QUERY_LIMITS.literalChars. */
const SHOWN_CHARS = 100;

/** A literal's text for a message: cut after SHOWN_CHARS characters (never mid code point), with how long it was. */
function shown(text: string): string {
  return text.length <= SHOWN_CHARS ? text : `${shortText(text, SHOWN_CHARS)} (${text.length} characters)`;
}

/**
 * A text expression compared in byte order (COLLATE "C"), as weave's stores compare strings: the
 * order must not depend on the database's default collation (a linguistic one puts 'hello there'
 * before 'Hello World').
 */
export function byteOrder(text: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(${text}) collate "C"`;
}

/**
 * The ORDER BY keys of a field: a typed value as it is (text in byte order); a JSON value by its
 * number, then by its text in byte order (reference §3.7).
 */
export function sortExprs(value: FieldValue): RawBuilder<unknown>[] {
  if (value.kind === 'typed') return [value.type === 'text' ? byteOrder(value.sql) : value.sql];
  return [toType(value, 'numeric'), byteOrder(sql`${value.sql} #>> '{}'`)];
}

/** Whether the value is SQL or JSON null; for JSON an explicit null and a missing path both count. */
export function isNull(value: Value): RawBuilder<unknown> {
  switch (value.kind) {
    case 'literal':
      return value.value === null ? sql`true` : sql`false`;
    case 'json':
      return sql`(coalesce(${value.sql}, 'null'::jsonb) = 'null'::jsonb)`;
    case 'typed':
      return sql`(${value.sql} is null)`;
  }
}

/** `$convert ... "exists"`: a JSON path that is present, even when set to null; a non-null otherwise. */
export function exists(value: Value): RawBuilder<unknown> {
  switch (value.kind) {
    case 'literal':
      return value.value === null ? sql`false` : sql`true`;
    case 'json':
    case 'typed':
      return sql`(${value.sql} is not null)`;
  }
}
