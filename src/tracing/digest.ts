import { createHash } from 'node:crypto';
import { isLosslessNumber } from 'lossless-json';

/**
 * The weave digests (reference §3.2). Objects and table rows are digested over Python's
 * `json.dumps(val, sort_keys=True)` text, so this module reproduces that text byte for byte: ", " and
 * ": " separators, ASCII-only output, and Python's int/float formatting.
 */

/** SHA-256, URL-safe base64 with `-`→`X`, `_`→`Y` and no padding: always 43 characters of [A-Za-z0-9]. */
export function bytesDigest(bytes: Uint8Array | string): string {
  return createHash('sha256').update(bytes).digest('base64url').replace(/-/g, 'X').replace(/_/g, 'Y');
}

/** Digest of a file's content. */
export const fileDigest = (content: Uint8Array): string => bytesDigest(content);

/** Digest of an object version's value (after the server's value processing). */
export const objectDigest = (value: unknown): string => bytesDigest(canonicalJson(value));

/** Digest of one table row. */
export const rowDigest = (row: unknown): string => bytesDigest(canonicalJson(row));

/** A table is its ordered row digests; its digest is lowercase hex SHA-256 of them concatenated. */
export function tableDigest(rowDigests: readonly string[]): string {
  const hash = createHash('sha256');
  for (const digest of rowDigests) hash.update(digest);
  return hash.digest('hex');
}

/** Python's `json.dumps(value, sort_keys=True)` for plain or lossless-json values. */
export function canonicalJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (value === true) return 'true';
  if (value === false) return 'false';
  if (typeof value === 'string') return pythonString(value);
  if (typeof value === 'number') return Number.isInteger(value) ? BigInt(value).toString() : pythonFloat(value);
  if (typeof value === 'bigint') return value.toString();
  if (isLosslessNumber(value)) return pythonNumberFromText(value.value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(', ')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value).filter(([, inner]) => inner !== undefined);
    entries.sort(([a], [b]) => compareCodePoints(a, b));
    return `{${entries.map(([key, inner]) => `${pythonString(key)}: ${canonicalJson(inner)}`).join(', ')}}`;
  }
  throw new TypeError(`Cannot digest a value of type ${typeof value}`);
}

/** A JSON number literal as Python prints it after `json.loads`: with `.`, `e` or `E` it is a float. */
function pythonNumberFromText(text: string): string {
  if (/[.eE]/.test(text)) return pythonFloat(Number(text));
  return BigInt(text).toString(); // normalises "-0" to "0" as Python's int does
}

/** Python's float `repr` (shortest round-trip digits), as `json.dumps` writes it. */
export function pythonFloat(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return 'Infinity';
  if (value === -Infinity) return '-Infinity';
  // toExponential() with no argument gives the shortest digits that round-trip, like Python's repr.
  const [mantissa, exponentText] = Math.abs(value).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const exponent = Number(exponentText);
  const sign = value < 0 || Object.is(value, -0) ? '-' : '';
  // Python switches to exponent notation when the decimal point is 5+ places left or 16+ places right.
  if (exponent < -4 || exponent >= 16) {
    const fraction = digits.length > 1 ? `.${digits.slice(1)}` : '';
    const expSign = exponent < 0 ? '-' : '+';
    return `${sign}${digits[0]}${fraction}e${expSign}${String(Math.abs(exponent)).padStart(2, '0')}`;
  }
  if (exponent < 0) return `${sign}0.${'0'.repeat(-exponent - 1)}${digits}`;
  const intPart = digits.slice(0, exponent + 1).padEnd(exponent + 1, '0');
  const fracPart = digits.slice(exponent + 1) || '0';
  return `${sign}${intPart}.${fracPart}`;
}

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  '\\': '\\\\',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
};

/** A JSON string with Python's `ensure_ascii`: everything outside space..~ escaped, per UTF-16 unit. */
function pythonString(value: string): string {
  const escaped = value.replace(/["\\]|[^\x20-\x7e]/g, (char) => {
    return SHORT_ESCAPES[char] ?? `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`;
  });
  return `"${escaped}"`;
}

/** Python sorts keys by code point; JavaScript's default sort compares UTF-16 units. */
function compareCodePoints(a: string, b: string): number {
  const left = [...a];
  const right = [...b];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const diff = left[i].codePointAt(0)! - right[i].codePointAt(0)!;
    if (diff !== 0) return diff;
  }
  return left.length - right.length;
}
