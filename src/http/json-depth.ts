import { isLosslessNumber } from 'lossless-json';
import type { z } from 'zod';

/**
 * How deep a JSON value a client sends may nest (objects and arrays) to be stored: every write path
 * that stores client JSON (trace calls, feedback, objects, tables, OTLP attributes, trajectory groups,
 * job configs) refuses a deeper one, so that what a write accepts every reader can return. Readers are
 * the bound: PostgreSQL in PGlite's WebAssembly stack refuses to read JSONB a few thousand levels
 * deep, and Python's json module (the weave SDK, the reference trainer) stops near 1,000 nested levels
 * (its recursion limit). Real traces nest a few dozen levels.
 */
export const MAX_JSON_DEPTH = 256;

/** The message of a value nested past MAX_JSON_DEPTH. */
export const TOO_DEEP_MESSAGE = `the value nests more than ${MAX_JSON_DEPTH} levels of objects and arrays, the most that is stored; flatten it or send it as a string`;

/** An object or array; a number kept exactly (a LosslessNumber, written as a number) is none. */
const nests = (value: unknown): value is object => value !== null && typeof value === 'object' && !isLosslessNumber(value);

/**
 * Whether `value` nests more than `max` levels of objects and arrays (a scalar is 0 levels, `{}` 1).
 * Iterative, so that a value deeper than the call stack is measured rather than overflowing it.
 */
export function nestsDeeperThan(value: unknown, max: number = MAX_JSON_DEPTH): boolean {
  if (!nests(value)) return false;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (depth > max) return true;
    const children = Array.isArray(node) ? node : Object.values(node as Record<string, unknown>);
    for (const child of children) {
      if (nests(child)) stack.push([child, depth + 1]);
    }
  }
  return false;
}

/**
 * `schema` refusing a value nested past MAX_JSON_DEPTH with a 422 detail at the field's own location
 * (`Value error, the value nests more than 256 levels ...`).
 */
export function boundedDepth<T extends z.ZodType>(schema: T): T {
  return schema.refine((value) => !nestsDeeperThan(value), {
    message: `Value error, ${TOO_DEEP_MESSAGE}`,
    params: { type: 'value_error', ctx: { error: TOO_DEEP_MESSAGE, max_depth: MAX_JSON_DEPTH } },
  }) as T;
}
