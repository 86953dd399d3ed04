import { UNSTORABLE_CHARACTER } from '../db/refusals.js';
import { unmarkNumbers } from '../http/exact-numbers.js';
import { ExactNumber, parsePayloadText } from './exact-numbers.js';

/**
 * Call payloads (upsert_batch, call/start, call/end, call/update, OTel, v2) are stored with the
 * characters PostgreSQL cannot hold replaced rather than refused (docs/tracing.md, "NUL characters and
 * lone surrogates"): U+0000 and unpaired UTF-16 surrogates become U+FFFD. Routes whose values are
 * digested (objects, tables) keep refusing them, since a replacement would change the digest.
 */

const BAD_CHARS = new RegExp(UNSTORABLE_CHARACTER.source, 'g');

/** The string with U+0000 and lone surrogates replaced by U+FFFD (a surrogate pair is kept). */
export function cleanString(text: string): string {
  return text.replace(BAD_CHARS, '\ufffd');
}

export function cleanNullable<T extends string | null | undefined>(text: T): T {
  return (typeof text === 'string' ? cleanString(text) : text) as T;
}

/** A JSON value with every string and key cleaned; values that need nothing are returned as they are. */
export function cleanJson(value: unknown): unknown {
  if (typeof value === 'string') return cleanString(value);
  if (value === null || typeof value !== 'object' || value instanceof ExactNumber) return value;
  if (Array.isArray(value)) return value.map(cleanJson);
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    Object.defineProperty(out, cleanString(key), {
      value: cleanJson((value as Record<string, unknown>)[key]),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/**
 * JSON text for a JSONB column, cleaned. JSON.stringify writes U+0000 and lone surrogates as `\u` escapes
 * (pairs stay raw), so text without such an escape needs no walk; the rest is parsed, cleaned and
 * written again (an escaped backslash followed by `u0000` only costs that walk).
 */
export function cleanJsonText(text: string): string;
export function cleanJsonText(text: string | null): string | null;
export function cleanJsonText(text: string | null): string | null {
  if (text === null || !/\\u(0000|d[89a-f])/i.test(text)) return text;
  return unmarkNumbers(JSON.stringify(cleanJson(parsePayloadText(text))));
}

/** The first `max` UTF-16 units of `text`, one fewer when the last would split a surrogate pair. */
export function cutText(text: string, max: number): string {
  const cut = text.slice(0, max);
  return /[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/** `text` cut to `max` characters (never mid code point) and `…`, for messages that name a client's value. */
export function shortText(text: string, max = 64): string {
  return text.length <= max ? text : `${cutText(text, max)}…`;
}
