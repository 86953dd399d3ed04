import { LosslessNumber } from 'lossless-json';
import { hasMarkedNumbers, MARK, MARKED_OVERHEAD, parseWithExactNumbers, unmarkNumbers, wholeFloatText, type HeldValue } from '../http/exact-numbers.js';

/**
 * Numbers in payloads (a call's attributes, inputs, output, summary and otel_dump; a feedback's payload)
 * that a double would change, kept from the request body (or an OpenTelemetry span's typed values) to
 * JSONB and back to every reader, as the Python server keeps them: integers beyond
 * 2^53, digit for digit, and whole-valued floats (`1.0`, `1e+16`), which stay floats for a Python client
 * (`1.0`, `10000000000000000.0`) instead of reading back as ints. Query literals keep their long
 * integers, so a filter on a stored one compares with the exact value. Anything else stays a plain
 * number, and a text that cannot hold such a literal is parsed natively, so ordinary calls cost about
 * what they did (docs/benchmarks.md, "Exact numbers in calls").
 *
 * An exact number is an ExactNumber: lossless-json writes it as its literal, and JSON.stringify writes
 * it as a marked string that `unmarkNumbers` (http/exact-numbers.ts) turns back into the literal. Every
 * call write does that before its text reaches the database, and the tracing plugin does it to every
 * JSON text it answers with.
 */
export class ExactNumber extends LosslessNumber {
  toJSON(): string {
    return `${MARK}${this.value}`;
  }

  /** Whether it is an integer beyond 2^53 rather than a whole float. */
  get isInteger(): boolean {
    return !this.value.includes('.');
  }
}

const exactNumber = (literal: string) => new ExactNumber(literal);

/**
 * The typed numbers of one OTLP export as its payloads keep them: a whole `doubleValue` as an ExactNumber,
 * so that it stays a float, and an int64 beyond 2^53 as an ExactNumber of its digits. Their text is
 * bounded. A whole double is written out in full (`1e308` is 309 digits, where protobuf takes 9 bytes),
 * marked while a row goes through JSON.stringify, and a span's attribute is written up to three times
 * (its call's inputs or output, its attributes, its otel_span), so an export of nothing else would grow
 * past what a string holds. Each is charged three times its marked text, and past twice the export's
 * size and 64 Ki characters they are what they were before: plain doubles, and int64s as their digits
 * in a string. Resource and scope attributes, copied into every span's otel_span, are always so (`plain`).
 */
export class ExactOtlpNumbers {
  /** Numbers as they were before this class: for resource and scope attributes. */
  static readonly plain = new ExactOtlpNumbers(-1);

  private left: number;

  /** `exportSize`: the export's size in bytes (protobuf) or characters (JSON); -1 keeps nothing. */
  constructor(exportSize: number) {
    this.left = exportSize < 0 ? 0 : 2 * exportSize + 65_536;
  }

  double(value: number): number | ExactNumber {
    return this.kept(wholeFloatText(value)) ?? value;
  }

  /** An int64's decimal digits: a number where a double holds it exactly. */
  integer(digits: string): number | string | ExactNumber {
    const value = Number(digits);
    if (Number.isSafeInteger(value)) return value;
    const text = BigInt(digits).toString();
    return this.kept(text) ?? text;
  }

  private kept(text: string | undefined): ExactNumber | undefined {
    if (text === undefined) return undefined;
    const size = 3 * (text.length + MARKED_OVERHEAD);
    if (size > this.left) return undefined;
    this.left -= size;
    return new ExactNumber(text);
  }
}

/** A JSON object that is no ExactNumber (which is an object too). */
export const isJsonObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof ExactNumber);

/**
 * A stored payload value as a number the server computes with (token counts, status counts): a number,
 * an ExactNumber as its double (`10.0` counts as 10), or undefined for anything else.
 */
export function numberOf(value: unknown): number | undefined {
  const number = value instanceof ExactNumber ? Number(value.value) : value;
  return typeof number === 'number' && Number.isFinite(number) ? number : undefined;
}

/** Set on a value read with exact numbers (a CallSchema of a flagged row): its JSON text needs `unmarkNumbers`. */
const HOLDS_EXACT = Symbol('holdsExactNumbers');

export function markHoldsExactNumbers(value: object): void {
  Object.defineProperty(value, HOLDS_EXACT, { value: true });
}

/** Whether JSON.stringify's text of `value` may hold marked numbers (markHoldsExactNumbers). */
export function holdsExactNumbers(value: unknown): boolean {
  return value !== null && typeof value === 'object' && HOLDS_EXACT in value;
}

/**
 * The keys whose values are payloads (of calls, and of feedback): their exact numbers are kept. A call's
 * `otel_dump` (its OpenTelemetry span) is one too, read back as `attributes.otel_span`.
 */
const PAYLOAD_KEYS = new Set(['attributes', 'inputs', 'output', 'summary', 'payload', 'otel_dump']);

/** A query literal, whose long integers are kept (a whole float compares as its double does). */
const LITERAL_KEY = '$literal';

/** An exact number taken out of a request body for validation, to be put back after it with `restoreHeld`. */
export type HeldNumber = HeldValue<ExactNumber>;

type Kept = 'none' | 'payload' | 'literal';

/**
 * A request body parsed with its exact numbers: the body with each one replaced by the nearest double,
 * which is what the schemas check (as before), and those of them in payloads and query literals, to put
 * back with `restoreHeld` once the body is validated. Elsewhere (limits, steps) validation's double stays.
 */
export function parseExactNumbers(text: string): { value: unknown; held: HeldNumber[] } {
  const { value, exact } = parseWithExactNumbers(text, exactNumber, { wholeFloats: true });
  if (!exact) return { value, held: [] };
  const held: HeldNumber[] = [];
  const path: (string | number)[] = [];
  const walk = (item: unknown, kept: Kept): unknown => {
    if (item instanceof ExactNumber) {
      if (kept === 'payload' || (kept === 'literal' && item.isInteger)) held.push({ path: [...path], value: item });
      return Number(item.value);
    }
    if (Array.isArray(item)) {
      for (let i = 0; i < item.length; i++) {
        path.push(i);
        item[i] = walk(item[i], kept);
        path.pop();
      }
    } else if (item !== null && typeof item === 'object') {
      const object = item as Record<string, unknown>;
      for (const key of Object.keys(object)) {
        path.push(key);
        object[key] = walk(object[key], kept !== 'none' ? kept : PAYLOAD_KEYS.has(key) ? 'payload' : key === LITERAL_KEY ? 'literal' : 'none');
        path.pop();
      }
    }
    return item;
  };
  return { value: walk(value, 'none'), held };
}

/** A payload's JSON text for JSONB, its exact numbers written as their literals; `exact`: whether it held any. */
export function payloadJsonText(value: unknown): { text: string; exact: boolean } {
  const json = JSON.stringify(value);
  const exact = hasMarkedNumbers(json);
  return { text: exact ? unmarkNumbers(json) : json, exact };
}

/**
 * A call payload's JSON text (as JSONB keeps it: every digit, `1.0` apart from `1`), its exact numbers as
 * ExactNumbers. `stored`: the text of a row flagged as holding them, scanned without a native parse first.
 */
export function parsePayloadText(text: string, stored = false): unknown {
  return parseWithExactNumbers(text, exactNumber, { plain: true, wholeFloats: true, scanFirst: stored }).value;
}
