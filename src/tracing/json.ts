import { isLosslessNumber, parse, stringify, type LosslessNumber } from 'lossless-json';
import { sql, type RawBuilder } from 'kysely';
import { InvalidRequestError } from '../errors.js';

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
    return parse(text, null, { onDuplicateKey: ({ newValue }) => newValue }) as LosslessJson;
  } catch (error) {
    throw new InvalidRequestError(`Invalid JSON body: ${(error as Error).message}`);
  }
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
