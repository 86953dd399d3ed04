import { isLosslessNumber, LosslessNumber, parse, stringify } from 'lossless-json';
import { sql, type RawBuilder } from 'kysely';
import { InvalidRequestError } from '../errors.js';
import { MAX_INTEGER_DIGITS } from '../http/exact-numbers.js';
import { pythonFloat } from './digest.js';

/**
 * JSON values as the tracing API sees them. Bodies whose values are digested are parsed losslessly, so
 * numbers arrive as LosslessNumber and keep their source text: the digest must tell `1.0` from `1`,
 * as the Python server does.
 */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type LosslessJson = string | LosslessNumber | boolean | null | LosslessJson[] | { [key: string]: LosslessJson };

/** Parses a request body keeping every number's text; a repeated key keeps its last value, like Python. */
export function parseLossless(text: string): LosslessJson {
  try {
    return parse(text, null, { onDuplicateKey: ({ newValue }) => newValue, parseNumber: losslessNumber }) as LosslessJson;
  } catch (error) {
    throw new InvalidRequestError(`Invalid JSON body: ${(error as Error).message}`);
  }
}

/** A number's text as a LosslessNumber; an integer longer than Python's json reads is refused (http/exact-numbers.ts). */
function losslessNumber(text: string): LosslessNumber {
  if (text.length > MAX_INTEGER_DIGITS && !/[.eE]/.test(text)) {
    const digits = text.length - (text.startsWith('-') ? 1 : 0);
    if (digits > MAX_INTEGER_DIGITS) throw new Error(`Exceeds the limit (${MAX_INTEGER_DIGITS} digits) for integer string conversion: value has ${digits} digits`);
  }
  return new LosslessNumber(text);
}

/** Turns lossless values into plain ones (numbers become JavaScript numbers) for code that computes on them. */
export function toPlainJson(value: unknown): JsonValue {
  if (isLosslessNumber(value)) return Number(value.value);
  if (Array.isArray(value)) return value.map(toPlainJson);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, JsonValue> = {};
    for (const [key, inner] of Object.entries(value)) {
      if (inner !== undefined) out[key] = toPlainJson(inner);
    }
    return out;
  }
  return value as JsonValue;
}

/**
 * A JSONB value to write, from plain or lossless values. Numbers keep their source text (jsonb keeps
 * `1.0` and digits beyond float precision). Written as text cast to jsonb because the pg driver turns
 * JavaScript arrays into Postgres arrays.
 */
export function jsonb<T = JsonValue>(value: unknown): RawBuilder<T> {
  return sql<T>`${stringify(value) ?? 'null'}::jsonb`;
}

/**
 * JSON text of a digested value (object values, table rows) as it is written to JSONB. Number text is
 * kept, except that a float written with an exponent (`1e5`) is spelled out as a decimal with a
 * fractional part (`100000.0`): JSONB's numeric would otherwise turn it into the integer `100000`, and
 * the value read back would digest differently.
 */
export function storedJsonText(value: unknown): string {
  return stringify(value, (_key, inner) => (isLosslessNumber(inner) && /[eE]/.test(inner.value) ? new LosslessNumber(decimalFloat(inner.value)) : inner)) ?? 'null';
}

/** `1.5e3` → `1500.0`, `1e-7` → `0.0000001`: the float's Python repr digits as a plain decimal. */
function decimalFloat(text: string): string {
  const number = Number(text);
  if (!Number.isFinite(number)) return text; // beyond a double: kept as sent
  const repr = pythonFloat(number);
  const match = /^(-?)(\d)(?:\.(\d+))?e([-+]\d+)$/.exec(repr);
  if (!match) return repr; // already plain decimal with a fraction
  const [, sign, lead, fraction = '', exponentText] = match;
  const digits = lead + fraction;
  const exponent = Number(exponentText);
  if (exponent < 0) return `${sign}0.${'0'.repeat(-exponent - 1)}${digits}`;
  const intPart = digits.slice(0, exponent + 1).padEnd(exponent + 1, '0');
  return `${sign}${intPart}.${digits.slice(exponent + 1) || '0'}`;
}

/**
 * Stored JSONB read back as text (`val::text`), losslessly: a number whose text a JavaScript number
 * writes back unchanged becomes one; any other (`1.0`, integers beyond 2^53) stays a LosslessNumber, so
 * that the value is answered, and digests, as it was sent. Send such values with `losslessJsonText`.
 */
export function parseStoredJson(text: string | null): unknown {
  if (text === null) return null;
  return parse(text, null, (number) => {
    const plain = Number(number);
    return String(plain) === number ? plain : new LosslessNumber(number);
  });
}

/** JSON text of a value that may hold LosslessNumbers (their text is written as it is). */
export function losslessJsonText(value: unknown): string {
  return stringify(value) ?? 'null';
}

export { isLosslessNumber };
