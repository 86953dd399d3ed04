import { LosslessNumber } from 'lossless-json';
import { MARK, parseWithLongIntegers, type HeldValue } from '../http/long-integers.js';

/**
 * Integers beyond 2^53 in call payloads (attributes, inputs, output, summary), kept digit for digit
 * from the request body to JSONB and back to every reader, as the Python server keeps them, and in the
 * literals of calls queries, which compare with them exactly. Anything a double holds exactly stays a
 * plain number, and a text that cannot hold a longer integer is parsed natively, so ordinary calls
 * cost about what they did (docs/benchmarks.md, "Exact integers in calls").
 *
 * An exact integer is an ExactInteger: lossless-json writes it as its digits, and JSON.stringify
 * writes it as a marked string that `unmarkLongIntegers` (http/long-integers.ts) turns back into the
 * digits. Every call write does that before its text reaches the database, and the tracing plugin does
 * it to every JSON text it answers with.
 */
export class ExactInteger extends LosslessNumber {
  toJSON(): string {
    return `${MARK}${this.value}`;
  }
}

const exactInteger = (digits: string) => new ExactInteger(digits);

/**
 * The keys under which a request's exact integers are kept: the call payloads, and query literals (a
 * filter on a stored exact integer must compare with the exact value). Elsewhere (limits, steps)
 * validation's double stays, as before.
 */
const EXACT_KEYS = new Set(['attributes', 'inputs', 'output', 'summary', '$literal']);

/** An exact integer taken out of a request body for validation, to be put back after it with `restoreIntegers`. */
export type HeldInteger = HeldValue<ExactInteger>;

/**
 * A request body parsed with its long integers exact: the body with each one replaced by the nearest
 * double, which is what the schemas check (as before), and those of them under EXACT_KEYS, to put back
 * with `restoreIntegers` once the body is validated.
 */
export function parseExactIntegers(text: string): { value: unknown; held: HeldInteger[] } {
  const { value, exact } = parseWithLongIntegers(text, exactInteger);
  if (!exact) return { value, held: [] };
  const held: HeldInteger[] = [];
  const path: (string | number)[] = [];
  const walk = (item: unknown, kept: boolean): unknown => {
    if (item instanceof ExactInteger) {
      if (kept) held.push({ path: [...path], value: item });
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
        object[key] = walk(object[key], kept || EXACT_KEYS.has(key));
        path.pop();
      }
    }
    return item;
  };
  return { value: walk(value, false), held };
}

/** A call payload's JSON text (as JSONB keeps it: every digit), its integers beyond 2^53 as ExactIntegers. */
export function parsePayloadText(text: string): unknown {
  return parseWithLongIntegers(text, exactInteger, true).value;
}
