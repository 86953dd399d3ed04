import { randomBytes } from 'node:crypto';
import { PayloadTooLargeError } from '../errors.js';
import { isPlainJson, parseJsonBody, walkJson } from './json-body.js';
import { RequestValidationError } from './validation.js';

/**
 * JSON number literals that JSON.parse changes. It reads every number as a double, so an integer
 * literal beyond 2^53 (a 63-bit seed, a snowflake id) comes out as another integer, and a float with a
 * whole value (`1.0`, `1e+16`) comes out as a number JSON.stringify writes as an integer, which a Python
 * client then reads as an int. A text is parsed natively first; only when its numbers say it may hold
 * such a literal is it scanned and parsed again with them kept, so the common body costs a parse and a
 * walk of its numbers (docs/benchmarks.md, "Exact numbers in calls").
 */

/**
 * Where a whole-valued float may be written: a fraction of zeros (`1.0`, `-2.00`, `1.0e3`), or a
 * non-negative exponent (`1e+16`, `1.5e3`, `7e0`), ending a number. The scan keeps exactly these forms
 * (a negative exponent, as in `10e-1`, is read as the double it is); some strings match too, which only
 * cost the scan.
 */
const WHOLE_FLOAT_HINT = /\d(?:\.0+(?:[\s,\]}eE]|$)|[eE]\+?\d+(?:[\s,\]}]|$))/;

/** Marks a literal while the text goes through JSON.parse; random, so no client string can pass for one. */
export const MARK = `\u0000num-${randomBytes(8).toString('hex')}:`;
/** MARK as JSON.stringify writes it inside a string. */
const MARK_JSON = JSON.stringify(MARK).slice(1, -1);
/** What a marked literal adds to the literal in JSON.stringify's text: the mark and two quotes. */
export const MARKED_OVERHEAD = MARK_JSON.length + 2;
const MARKED_LITERAL = new RegExp(`"${MARK_JSON.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')}(-?\\d+(?:\\.0)?)"`, 'g');

export interface ExactParseOptions {
  /** `isPlainJson(text)`, when the caller has it. */
  plain?: boolean;
  /** Keep whole-valued floats apart from integers too (as `<digits>.0`); otherwise only long integers. */
  wholeFloats?: boolean;
  /**
   * Scan the text without parsing it natively first: for a text that most likely holds such a literal
   * (a payload stored with one), where the first parse would be wasted.
   */
  scanFirst?: boolean;
  /** Refuse strings that PostgreSQL cannot store, as `parseJsonBody` does (not with `scanFirst`). */
  rejectNul?: boolean;
}

const TWO_TO_53 = 2 ** 53;

/** What a parsed value's numbers allow: 2, one at or beyond 2^53; 1, a whole one; 0, neither. */
function numbersIn(value: unknown): 0 | 1 | 2 {
  if (typeof value === 'number') return Math.abs(value) >= TWO_TO_53 ? 2 : Number.isInteger(value) ? 1 : 0;
  if (value === null || typeof value !== 'object') return 0;
  let found: 0 | 1 | 2 = 0;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const kind = numbersIn(value[i]);
      if (kind === 2) return 2;
      if (kind === 1) found = 1;
    }
  } else {
    // JSON.parse's objects own all their keys and inherit none to enumerate.
    for (const key in value) {
      const kind = numbersIn((value as Record<string, unknown>)[key]);
      if (kind === 2) return 2;
      if (kind === 1) found = 1;
    }
  }
  return found;
}

/**
 * The text parsed as `parseJsonBody` parses it (json-body.ts), each literal a double would change passed
 * to `make` with the text to keep: an integer's digits, or a whole float as `<digits>.0` (`1e+16` is
 * `10000000000000000.0`, a form JSONB keeps); `exact` says whether there was one. An integer literal
 * beyond 2^53 parses to a double at least that large, and a whole float to a whole double, so a text
 * whose parsed numbers have neither is done after the native parse. `large`: a number at or beyond 2^53
 * may have been read as a double (the infinities too); false when the native parse found none.
 */
export function parseWithExactNumbers(
  text: string,
  make: (literal: string) => unknown,
  options: ExactParseOptions = {},
): { value: unknown; exact: boolean; large: boolean } {
  const { plain = isPlainJson(text), wholeFloats = false, scanFirst = false, rejectNul = false } = options;
  let value: unknown;
  let large = true;
  if (!scanFirst) {
    value = parseJsonBody(text, { plain, rejectNul });
    const found = numbersIn(value);
    large = found === 2;
    if (found === 0 || (found === 1 && (!wholeFloats || !WHOLE_FLOAT_HINT.test(text)))) return { value, exact: false, large };
  }
  const marked = markExactNumbers(text, wholeFloats);
  if (marked === text) return { value: scanFirst ? parseJsonBody(text, { plain }) : value, exact: false, large };
  // The marks add quoted `\u0000num-<hex>:` strings, which neither make nor hide a prototype key.
  return { value: revive(parseJsonBody(marked, { plain }), make), exact: true, large };
}

/**
 * The text to keep for a number literal (its fraction and exponent as matched) that a double would
 * change, or undefined for one it keeps. A whole float is kept as its integer digits and `.0`, from 1e21
 * up too: JSON.stringify would write an exponent there, which JSONB spells out as digits without a point,
 * and those would read back as an integer.
 */
function exactText(literal: string, fraction: string | undefined, exponent: string | undefined, wholeFloats: boolean): string | undefined {
  if (fraction === undefined && exponent === undefined) {
    // Fewer than 16 digits are below 2^53.
    if (literal.length - (literal.charCodeAt(0) === 0x2d ? 1 : 0) < 16) return undefined;
    return Number.isSafeInteger(Number(literal)) ? undefined : literal;
  }
  if (!wholeFloats) return undefined;
  if (exponent === undefined ? !/^\.0+$/.test(fraction!) : exponent.includes('-')) return undefined;
  return wholeFloatText(Number(literal));
}

/**
 * A whole double as the literal that keeps it a float: its integer digits and `.0` (`1e+21` is
 * `1000000000000000000000.0`); undefined for any other number, NaN and the infinities included.
 */
export function wholeFloatText(value: number): string | undefined {
  if (!Number.isInteger(value)) return undefined;
  return `${Object.is(value, -0) ? '-0' : integerDigits(value)}.0`;
}

/** A whole double's decimal digits from its shortest form (`1.5e+300` is 15 and 299 zeros). */
function integerDigits(value: number): string {
  const text = String(value);
  const e = text.indexOf('e');
  if (e < 0) return text;
  const [whole, fraction = ''] = text.slice(0, e).split('.');
  return whole + fraction + '0'.repeat(Number(text.slice(e + 1)) - fraction.length);
}

/**
 * The most a marked text may grow to, in characters: 16 times the text (a `1.0` grows 10 times as a mark),
 * and never past 256 Mi characters (V8 refuses strings of 512 Mi). A body of large whole floats (`1e308`
 * is 309 digits) would pass both.
 */
const markedLimit = (length: number): number => Math.min(16 * length + 65_536, 256 * 2 ** 20);

/**
 * The text with each number literal outside strings that a double would change put in a marked string.
 * One pass, linear in the text whatever it holds (invalid JSON included: it is scanned before JSON.parse
 * refuses it). A text whose marks would pass `markedLimit` is a 413.
 */
function markExactNumbers(text: string, wholeFloats: boolean): string {
  const limit = markedLimit(text.length);
  let out = '';
  let copied = 0;
  const number = /-?\d+(\.\d+)?([eE][+-]?\d+)?/y;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // Skip a string: its closing quote is the next quote not escaped by an odd run of backslashes
      // (each run is counted once, for the quote after it).
      for (;;) {
        const close = text.indexOf('"', i + 1);
        if (close < 0) return copied === 0 ? text : out + text.slice(copied);
        let slashes = 0;
        while (text.charCodeAt(close - 1 - slashes) === 0x5c) slashes++;
        i = close;
        if (slashes % 2 === 0) break;
      }
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      number.lastIndex = i;
      const match = number.exec(text);
      if (!match) continue;
      const literal = match[0];
      if (match[1] === undefined && match[2] === undefined) refuseLongInteger(literal, i);
      const kept = exactText(literal, match[1], match[2], wholeFloats);
      if (kept !== undefined) {
        out += `${text.slice(copied, i)}"${MARK_JSON}${kept}"`;
        copied = i + literal.length;
        if (out.length + (text.length - copied) > limit) {
          throw new PayloadTooLargeError(`The body's numbers, written out exactly, take more than ${limit} characters; send fewer or smaller whole floats.`);
        }
      }
      i += literal.length - 1;
    }
  }
  return copied === 0 ? text : out + text.slice(copied);
}

/**
 * The most digits of an integer literal: Python's json reads none longer (int's default
 * max_str_digits), and one of millions would take seconds to convert each way.
 */
export const MAX_INTEGER_DIGITS = 4300;

/** A 422 json_invalid at the literal, worded as Python's, for an integer literal past MAX_INTEGER_DIGITS. */
function refuseLongInteger(literal: string, position: number): void {
  const digits = literal.length - (literal.charCodeAt(0) === 0x2d ? 1 : 0);
  if (digits <= MAX_INTEGER_DIGITS) return;
  const error = `Exceeds the limit (${MAX_INTEGER_DIGITS} digits) for integer string conversion: value has ${digits} digits`;
  throw new RequestValidationError([{ type: 'json_invalid', loc: ['body', position], msg: 'JSON decode error', input: {}, ctx: { error } }]);
}

function revive(value: unknown, make: (literal: string) => unknown): unknown {
  if (typeof value === 'string') return value.startsWith(MARK) ? make(value.slice(MARK.length)) : value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = revive(value[i], make);
  } else if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    for (const key of Object.keys(object)) object[key] = revive(object[key], make);
  }
  return value;
}

/** Whether JSON.stringify's text holds a marked string (`unmarkNumbers` has literals to write). */
export function hasMarkedNumbers(json: string): boolean {
  return json.includes(MARK_JSON);
}

/** JSON text in which each marked string (`"<MARK><literal>"`) is written as the number literal it stands for. */
export function unmarkNumbers(json: string): string {
  return hasMarkedNumbers(json) ? json.replace(MARKED_LITERAL, '$1') : json;
}

/** An exact number taken out of a request body for validation (which sees a double there), to be put back after it. */
export interface HeldValue<T> {
  path: (string | number)[];
  value: T;
}

/**
 * Replaces each BigInt in a parsed body with the number validation is to see in its place (`stand`; by
 * default its nearest double), and returns where each was: to put back with `restoreHeld`, or to write the
 * exact digits of what is stored.
 */
export function holdBigInts(
  body: unknown,
  stand: (value: bigint, path: (string | number)[]) => number = (value) => Number(value),
): HeldValue<bigint>[] {
  const held: HeldValue<bigint>[] = [];
  // Each held value's path is a copy of the walk's one shared path, made only for it.
  const hold = (value: bigint, path: readonly (string | number)[]): number => {
    const kept = [...path];
    held.push({ path: kept, value });
    return stand(value, kept);
  };
  if (typeof body === 'bigint') hold(body, []);
  walkJson(body, (value, path, parent) => {
    if (typeof value === 'bigint') parent[path[path.length - 1]] = hold(value, path);
  });
  return held;
}

/** Puts held values back where validation left the doubles that stood for them. */
export function restoreHeld(body: unknown, held: readonly HeldValue<unknown>[]): void {
  for (const { path, value } of held) {
    let parent = body as Record<string | number, unknown> | undefined;
    for (let i = 0; i < path.length - 1 && parent; i++) parent = parent[path[i]] as Record<string | number, unknown> | undefined;
    const key = path[path.length - 1];
    if (parent && typeof parent === 'object' && typeof parent[key] === 'number') parent[key] = value;
  }
}
