import { randomBytes } from 'node:crypto';
import { isPlainJson, parseJsonBody } from '../http/json-body.js';
import { RequestValidationError, type ValidationDetail } from '../http/validation.js';

/**
 * Request bodies whose integers reach the engine exactly as the client wrote them. JSON.parse reads
 * every number as a double, which changes integers above 2^53 (a 63-bit `seed` becomes another seed,
 * or a value out of int64 range). A body with no run of 16 digits cannot hold such an integer and is
 * parsed natively (the common case, at native speed); any other is scanned once, its long integer
 * literals read as BigInt, and written back digit for digit when the engine body is serialised.
 */

const LONG_DIGITS = /\d{16}/;
/** Marks a long integer literal while the text goes through JSON.parse; random, so no client string can pass for one. */
const MARK = `\u0000int-${randomBytes(8).toString('hex')}:`;
const MARK_JSON = JSON.stringify(MARK).slice(1, -1);

const PLAIN = { plain: true };
const GUARDED = { plain: false };

/**
 * The parsed body; whether it holds BigInts (only then does validation need `holdIntegers`); and
 * whether it is plain JSON (json-body.ts `isPlainJson`): JSON.parse reads it whole, nothing dropped.
 */
export function parseExactJson(text: string): { value: unknown; exact: boolean; plain: boolean } {
  const plain = isPlainJson(text);
  const options = plain ? PLAIN : GUARDED;
  if (!LONG_DIGITS.test(text)) return { value: parseJsonBody(text, options), exact: false, plain };
  const marked = markLongIntegers(text);
  if (marked === text) return { value: parseJsonBody(text, options), exact: false, plain };
  // The marks add quoted `\u0000int-<hex>:` strings, which neither make nor hide a prototype key.
  return { value: revive(parseJsonBody(marked, options)), exact: true, plain };
}

/** The text with each integer literal outside strings that a double would change put in a marked string. */
function markLongIntegers(text: string): string {
  let out = '';
  let copied = 0;
  const number = /-?\d+(\.\d+)?([eE][+-]?\d+)?/y;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // Skip a string, escapes included.
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      number.lastIndex = i;
      const match = number.exec(text);
      if (!match) continue;
      const literal = match[0];
      if (match[1] === undefined && match[2] === undefined && !Number.isSafeInteger(Number(literal))) {
        out += `${text.slice(copied, i)}"${MARK_JSON}${literal}"`;
        copied = i + literal.length;
      }
      i += literal.length - 1;
    }
  }
  return copied === 0 ? text : out + text.slice(copied);
}

function revive(value: unknown): unknown {
  if (typeof value === 'string') return value.startsWith(MARK) ? BigInt(value.slice(MARK.length)) : value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = revive(value[i]);
  } else if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    for (const key of Object.keys(object)) object[key] = revive(object[key]);
  }
  return value;
}

/** JSON text of a body that may hold BigInts, each written as its exact digits. */
export function stringifyExact(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
  }
  const text = JSON.stringify(value, (_key, item: unknown) => (typeof item === 'bigint' ? `${MARK}${item}` : item));
  return text.replaceAll(new RegExp(`"${escapeRegExp(MARK_JSON)}(-?\\d+)"`, 'g'), '$1');
}

function escapeRegExp(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
}

// ---- Exact values through validation ----

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A BigInt taken out of a body for validation, to be put back after it. */
export interface HeldInteger {
  path: (string | number)[];
  value: bigint;
}

/** The integer fields vLLM bounds to int64; other integer fields are bounded to what a double holds exactly. */
const INT64_FIELDS = new Set(['seed', 'priority', 'truncate_prompt_tokens']);

/**
 * Replaces each BigInt in the body with a number the schemas can check, after checking the int64
 * range vLLM's pydantic models enforce on the exact value of `seed`, `priority` and
 * `truncate_prompt_tokens` (which validation then sees as ±2^53-1). Elsewhere validation sees the
 * nearest double, which an integer field refuses and a free-form one (tool parameters, logit_bias)
 * passes. Returns what to put back with `restoreIntegers`.
 */
export function holdIntegers(body: unknown): HeldInteger[] {
  const held: HeldInteger[] = [];
  const details: ValidationDetail[] = [];
  const walk = (value: unknown, path: (string | number)[]): unknown => {
    if (typeof value === 'bigint') {
      const int64 = path.length === 1 && INT64_FIELDS.has(path[0] as string);
      if (int64 && (value > INT64_MAX || value < INT64_MIN)) {
        const max = value > INT64_MAX;
        details.push({
          type: max ? 'less_than_equal' : 'greater_than_equal',
          loc: ['body', ...path],
          msg: max ? `Input should be less than or equal to ${INT64_MAX}` : `Input should be greater than or equal to ${INT64_MIN}`,
          input: value.toString(),
        });
      }
      held.push({ path, value });
      if (!int64) return Number(value);
      return value > 0n ? Number.MAX_SAFE_INTEGER : -Number.MAX_SAFE_INTEGER;
    }
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) value[i] = walk(value[i], [...path, i]);
    } else if (value !== null && typeof value === 'object') {
      const object = value as Record<string, unknown>;
      for (const key of Object.keys(object)) object[key] = walk(object[key], [...path, key]);
    }
    return value;
  };
  walk(body, []);
  if (details.length > 0) throw new RequestValidationError(details);
  return held;
}

/** Puts the held BigInts back where validation left the numbers that stood for them. */
export function restoreIntegers(body: unknown, held: readonly HeldInteger[]): void {
  for (const { path, value } of held) {
    let parent = body as Record<string | number, unknown> | undefined;
    for (let i = 0; i < path.length - 1 && parent; i++) parent = parent[path[i]] as Record<string | number, unknown> | undefined;
    const key = path[path.length - 1];
    if (parent && typeof parent === 'object' && typeof parent[key] === 'number') parent[key] = value;
  }
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
