import { z } from 'zod';
import { InvalidRequestError } from '../../errors.js';
import { boundedDepth } from '../../http/json-depth.js';

/**
 * Shared pieces of the tracing request and response schemas. Request objects are plain `z.object`s:
 * unknown fields are accepted and dropped, as clients of different releases send different shapes
 * (reference §1.2). Optional fields are `nullish`: Python clients send `null` for unset fields.
 */

/**
 * Bounds on what one request may carry (docs/tracing.md, "Limits"). Real clients send far less; each
 * bound keeps one request from holding the database (or, on PGlite, the event loop) for long, and a
 * request past one answers 422 naming the field.
 */
export const TRACING_LIMITS = {
  /** Ids, refs, digests and names in one filter or id list. */
  listItems: 1000,
  /** Keys of one sort_by. */
  sortKeys: 32,
  /** Entries of fields, columns, expand_columns. */
  fields: 500,
  /** Items of one batch write (calls, feedback, costs), and updates of one table update. */
  batchItems: 10_000,
  /** Rows of one table create. */
  tableRows: 100_000,
  /** Characters of an id, ref, digest or name in a list, and of a field path. */
  keyLength: 2048,
  /**
   * Characters of a call's id, trace_id, parent_id, thread_id and turn_id. Each is indexed after the
   * project id: PostgreSQL refuses an index entry over 2,704 bytes, which 256 characters (at most 768
   * bytes of UTF-8) with a 512-character project id stay well below.
   */
  callIdLength: 256,
  /** Characters of a call's op_name and display_name (weave's own bound on display names). */
  callNameLength: 1024,
  /**
   * Bytes of UTF-8 of a call's op_name, which is indexed after the project id: 1,024 characters of CJK
   * text are 3,072 bytes, past the 2,704 PostgreSQL takes in an index entry.
   */
  opNameBytes: 2000,
  /**
   * Bytes of JSON one answer built whole in memory may hold: `/calls/query` and `/refs/read_batch`
   * (400 past it, naming the bound; an answer of a single call or value is never refused). As much as
   * one request may carry (the default BODY_LIMIT_MB); `/calls/stream_query` streams any number of calls.
   */
  answerBytes: 64 * 1024 * 1024,
} as const;

/** The 400 of an answer past TRACING_LIMITS.answerBytes: what it holds, how many fit, and what to do instead. */
export function answerTooLarge(what: string, route: string, fitting: number, instead: string): InvalidRequestError {
  const mib = TRACING_LIMITS.answerBytes / (1024 * 1024);
  return new InvalidRequestError(
    `The ${what} come to more than ${mib} MiB of JSON (${TRACING_LIMITS.answerBytes} bytes), the most one ${route} answer holds; the first ${fitting} fit. ${instead}`,
    { code: 'answer_too_large' },
  );
}

/** An id, ref, digest or name as list items and field paths carry them. */
export const Key = z.string().max(TRACING_LIMITS.keyLength);
/** A filter or id list. */
export const KeyList = z.array(Key).max(TRACING_LIMITS.listItems);
/** A call's id, trace_id, parent_id, thread_id or turn_id. */
export const CallIdText = z.string().max(TRACING_LIMITS.callIdLength);
/** A call's op_name or display_name. */
export const CallNameText = z.string().max(TRACING_LIMITS.callNameLength);
/** A call's op_name: a name, also bounded in bytes (it is indexed). */
export const OpNameText = CallNameText.min(1).refine(
  (name) => Buffer.byteLength(name, 'utf8') <= TRACING_LIMITS.opNameBytes,
  `op_name takes at most ${TRACING_LIMITS.opNameBytes} bytes of UTF-8`,
);
/**
 * A key that is indexed after the project id (a feedback's weave_ref, a cost's llm_id): bounded in bytes
 * as op_name is, since 2,048 characters of CJK text pass past what PostgreSQL takes in an index entry.
 */
export const indexedKey = (field: string) =>
  Key.refine(
    // A key past keyLength characters is refused for that alone.
    (text) => text.length > TRACING_LIMITS.keyLength || Buffer.byteLength(text, 'utf8') <= TRACING_LIMITS.opNameBytes,
    `${field} takes at most ${TRACING_LIMITS.opNameBytes} bytes of UTF-8`,
  );
/** fields, columns, expand_columns. */
export const FieldList = z.array(Key).max(TRACING_LIMITS.fields);

export const ProjectId = z.string().max(512).describe('`entity/project`');

const ISO_DATETIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?)?(?:Z|[+-](\d{2})(?::?(\d{2}))?)?$/i;

/**
 * Whether the text is an ISO-8601 datetime that exists (no 2025-02-30, no hour 99) and that PostgreSQL's
 * timestamptz holds (years 1..9999 here). `dateOnly` also accepts a bare date (query literals).
 */
export function isValidIsoDateTime(text: string, options: { dateOnly?: boolean } = {}): boolean {
  const match = ISO_DATETIME.exec(text);
  if (!match) return false;
  const [, y, mo, d, h, mi, sec, offH, offM] = match;
  if (h === undefined && !options.dateOnly) return false;
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  if (year < 1 || month < 1 || month > 12 || day < 1) return false;
  // Day 0 of the next month is the last day of this one (years 1..99 are set explicitly: Date.UTC maps them to 19xx).
  const last = new Date(0);
  last.setUTCFullYear(year, month, 0);
  if (day > last.getUTCDate()) return false;
  if (h !== undefined && (Number(h) > 23 || Number(mi) > 59 || (sec !== undefined && Number(sec) > 59))) return false;
  if (offH !== undefined && (Number(offH) > 15 || (offM !== undefined && Number(offM) > 59))) return false;
  return true;
}

export const DateTime = z
  .string()
  .refine((text) => isValidIsoDateTime(text), 'must be an ISO-8601 datetime that exists, in years 1 to 9999')
  .describe('ISO-8601 datetime');

export const AnyJson = z.unknown().describe('any JSON value');
/**
 * A JSON object, checked but not copied: call payloads are large and written as they came, so a
 * key-by-key record parse would only cost time (see bench/tracing.ts).
 */
export const JsonObject = z
  .custom<Record<string, unknown>>((value) => value !== null && typeof value === 'object' && !Array.isArray(value), {
    message: 'Input should be a valid dictionary',
  })
  .meta({ type: 'object', additionalProperties: true });

/**
 * What a write stores from the client: any JSON value, or an object, nested at most MAX_JSON_DEPTH
 * levels (422 naming the field beyond), so that every reader can return it.
 */
export const StoredJson = boundedDepth(AnyJson);
export const StoredJsonObject = boundedDepth(JsonObject);

export const SortBy = z.object({ field: Key, direction: z.string().max(16).describe('asc or desc') });
export const SortByList = z.array(SortBy).max(TRACING_LIMITS.sortKeys);

export const Limit = z.number().int().min(0).nullish();
export const Offset = z.number().int().min(0).nullish();

export const Empty = z.object({}).describe('Empty object');

export const tags = ['tracing'];
