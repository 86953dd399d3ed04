import { randomBytes } from 'node:crypto';
import { isPlainJson, parseJsonBody } from './json-body.js';

/**
 * JSON integers that a double would change. JSON.parse reads every number as a double, so an integer
 * literal beyond 2^53 (a 63-bit seed, a snowflake id) comes out as another integer. A text is parsed
 * with its long integer literals kept only when it may hold one; the check is one native scan, so the
 * common body is parsed as before.
 */

/**
 * A run of 16 digits not preceded by a digit, a point, an exponent letter or a plus sign: the start of
 * an integer literal (or of its digits after a minus sign) at least as long as 2^53, or digits inside a
 * string. The fractional digits of a float (`0.30000000000000004`) do not match.
 */
const LONG_DIGITS = /(?<![\d.eE+])\d{16}/;

/** Marks a long integer literal while the text goes through JSON.parse; random, so no client string can pass for one. */
export const MARK = `\u0000int-${randomBytes(8).toString('hex')}:`;
/** MARK as JSON.stringify writes it inside a string. */
const MARK_JSON = JSON.stringify(MARK).slice(1, -1);
const MARKED_LITERAL = new RegExp(`"${MARK_JSON.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')}(-?\\d+)"`, 'g');

/** Whether the text may hold an integer literal that a double would change (false: it cannot). */
export function mayHoldLongInteger(text: string): boolean {
  return LONG_DIGITS.test(text);
}

/**
 * The text parsed as `parseJsonBody` parses it (json-body.ts), each integer literal a double would
 * change passed to `make` with its digits; `exact` says whether there was one. `plain`: `isPlainJson(text)`.
 */
export function parseWithLongIntegers(text: string, make: (digits: string) => unknown, plain = isPlainJson(text)): { value: unknown; exact: boolean } {
  const options = { plain };
  if (!mayHoldLongInteger(text)) return { value: parseJsonBody(text, options), exact: false };
  const marked = markLongIntegers(text);
  if (marked === text) return { value: parseJsonBody(text, options), exact: false };
  // The marks add quoted `\u0000int-<hex>:` strings, which neither make nor hide a prototype key.
  return { value: revive(parseJsonBody(marked, options), make), exact: true };
}

/**
 * The text with each integer literal outside strings that a double would change put in a marked string.
 * One pass, linear in the text whatever it holds (invalid JSON included: it is scanned before JSON.parse
 * refuses it).
 */
function markLongIntegers(text: string): string {
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
      if (match[1] === undefined && match[2] === undefined && !Number.isSafeInteger(Number(literal))) {
        out += `${text.slice(copied, i)}"${MARK_JSON}${literal}"`;
        copied = i + literal.length;
      }
      i += literal.length - 1;
    }
  }
  return copied === 0 ? text : out + text.slice(copied);
}

function revive(value: unknown, make: (digits: string) => unknown): unknown {
  if (typeof value === 'string') return value.startsWith(MARK) ? make(value.slice(MARK.length)) : value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = revive(value[i], make);
  } else if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    for (const key of Object.keys(object)) object[key] = revive(object[key], make);
  }
  return value;
}

/** Whether JSON.stringify's text holds a marked string (`unmarkLongIntegers` has digits to write). */
export function hasMarkedIntegers(json: string): boolean {
  return json.includes(MARK_JSON);
}

/** JSON text in which each marked string (`"<MARK><digits>"`) is written as the integer literal it stands for. */
export function unmarkLongIntegers(json: string): string {
  return hasMarkedIntegers(json) ? json.replace(MARKED_LITERAL, '$1') : json;
}

/** A long integer taken out of a request body for validation (which sees a number there), to be put back after it. */
export interface HeldValue<T> {
  path: (string | number)[];
  value: T;
}

/** Puts held integers back where validation left the numbers that stood for them. */
export function restoreIntegers(body: unknown, held: readonly HeldValue<unknown>[]): void {
  for (const { path, value } of held) {
    let parent = body as Record<string | number, unknown> | undefined;
    for (let i = 0; i < path.length - 1 && parent; i++) parent = parent[path[i]] as Record<string | number, unknown> | undefined;
    const key = path[path.length - 1];
    if (parent && typeof parent === 'object' && typeof parent[key] === 'number') parent[key] = value;
  }
}
