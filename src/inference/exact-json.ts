import { isPlainJson } from '../http/json-body.js';
import { holdBigInts, MARK, parseWithExactNumbers, unmarkNumbers, type HeldValue } from '../http/exact-numbers.js';
import { RequestValidationError, type ValidationDetail } from '../http/validation.js';

export { restoreHeld } from '../http/exact-numbers.js';

/**
 * Request bodies whose integers reach the engine exactly as the client wrote them. JSON.parse reads
 * every number as a double, which changes integers above 2^53 (a 63-bit `seed` becomes another seed,
 * or a value out of int64 range). Long integer literals are read as BigInt (http/exact-numbers.ts; a
 * body that cannot hold one is parsed natively) and written back digit for digit when the engine body
 * is serialised.
 */

/**
 * The parsed body; whether it holds BigInts (only then does validation need `holdIntegers`); and
 * whether it is plain JSON (json-body.ts `isPlainJson`): JSON.parse reads it whole, nothing dropped.
 */
export function parseExactJson(text: string): { value: unknown; exact: boolean; plain: boolean } {
  const plain = isPlainJson(text);
  const { value, exact } = parseWithExactNumbers(text, BigInt, { plain });
  return { value, exact, plain };
}

/** JSON text of a body that may hold BigInts, each written as its exact digits. */
export function stringifyExact(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
  }
  return unmarkNumbers(JSON.stringify(value, (_key, item: unknown) => (typeof item === 'bigint' ? `${MARK}${item}` : item)));
}

// ---- Exact values through validation ----

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A BigInt taken out of a body for validation, to be put back after it with `restoreHeld`. */
export type HeldInteger = HeldValue<bigint>;

/** The integer fields vLLM bounds to int64; other integer fields are bounded to what a double holds exactly. */
const INT64_FIELDS = new Set(['seed', 'priority', 'truncate_prompt_tokens']);

/**
 * Replaces each BigInt in the body with a number the schemas can check, after checking the int64
 * range vLLM's pydantic models enforce on the exact value of `seed`, `priority` and
 * `truncate_prompt_tokens` (which validation then sees as ±2^53-1). Elsewhere validation sees the
 * nearest double, which an integer field refuses and a free-form one (tool parameters, logit_bias)
 * passes. Returns what to put back with `restoreHeld`.
 */
export function holdIntegers(body: unknown): HeldInteger[] {
  const details: ValidationDetail[] = [];
  const held = holdBigInts(body, (value, path) => {
    const int64 = path.length === 1 && INT64_FIELDS.has(path[0] as string);
    if (!int64) return Number(value);
    if (value > INT64_MAX || value < INT64_MIN) {
      const max = value > INT64_MAX;
      details.push({
        type: max ? 'less_than_equal' : 'greater_than_equal',
        loc: ['body', ...path],
        msg: max ? `Input should be less than or equal to ${INT64_MAX}` : `Input should be greater than or equal to ${INT64_MIN}`,
        input: value.toString(),
      });
    }
    return value > 0n ? Number.MAX_SAFE_INTEGER : -Number.MAX_SAFE_INTEGER;
  });
  if (details.length > 0) throw new RequestValidationError(details);
  return held;
}

// ---- Lax scalars, as pydantic coerces them ----

export type LaxKind = 'int' | 'float' | 'bool';

const TRUE = new Set(['1', 'on', 't', 'true', 'y', 'yes']);
const FALSE = new Set(['0', 'off', 'f', 'false', 'n', 'no']);
const INT_TEXT = /^\s*[+-]?\d+\s*$/;
const FLOAT_TEXT = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;

/**
 * The value pydantic's lax mode would give a scalar field: numeric strings for numbers, the words
 * and 0/1 it takes for booleans, whole floats for integers. Anything else is returned unchanged (the
 * schema then reports it as vLLM would).
 */
export function laxScalar(value: unknown, kind: LaxKind): unknown {
  if (kind === 'bool') {
    if (typeof value === 'string') {
      const word = value.trim().toLowerCase();
      if (TRUE.has(word)) return true;
      if (FALSE.has(word)) return false;
    } else if (value === 0 || value === 1) return value === 1;
    return value;
  }
  if (typeof value === 'string') {
    if (INT_TEXT.test(value)) {
      const exact = BigInt(value.trim());
      const number = Number(exact);
      return Number.isSafeInteger(number) ? number : exact;
    }
    if (FLOAT_TEXT.test(value)) {
      const number = Number(value);
      if (kind === 'float' || Number.isInteger(number)) return number;
    }
    return value;
  }
  if (typeof value === 'boolean') return value ? 1 : 0;
  return value;
}

/**
 * Coerces the listed top-level fields of a body in place. Returns whether any value changed; a body
 * whose lax fields already hold their own types (the common case) is only looked at.
 */
export function coerceLaxFields(body: unknown, fields: Readonly<Record<string, LaxKind>>): boolean {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return false;
  const object = body as Record<string, unknown>;
  let changed = false;
  // Over the body's keys (a handful) rather than the table's.
  for (const key in object) {
    if (!Object.hasOwn(fields, key)) continue;
    const kind = fields[key];
    const value = object[key];
    if (value === undefined || value === null) continue;
    if (kind === 'bool' ? typeof value === 'boolean' : typeof value === 'number' || typeof value === 'bigint') continue;
    const coerced = laxScalar(value, kind);
    if (coerced !== value) {
      object[key] = coerced;
      changed = true;
    }
  }
  const options = object.stream_options;
  if (options !== null && typeof options === 'object' && !Array.isArray(options)) {
    const stream = options as Record<string, unknown>;
    for (const key of ['include_usage', 'continuous_usage_stats']) {
      const value = stream[key];
      if (value === undefined || typeof value === 'boolean') continue;
      const coerced = laxScalar(value, 'bool');
      if (coerced !== value) {
        stream[key] = coerced;
        changed = true;
      }
    }
  }
  return changed;
}
