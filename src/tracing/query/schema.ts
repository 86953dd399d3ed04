import { z } from 'zod';
import { InvalidRequestError } from '../../errors.js';
import type { JsonValue } from '../json.js';
import { Key, KeyList, TRACING_LIMITS } from '../schemas/common.js';

/**
 * Bounds on one query: the compiled SQL grows with each, and on PGlite a long statement blocks the
 * event loop. Filters of the weave UI nest a few levels and hold a few dozen operands.
 */
export const QUERY_LIMITS = {
  depth: 32,
  operands: 2000,
  listItems: TRACING_LIMITS.listItems,
  /**
   * Characters of one `$literal` as JSON text. A filter compares fields with short values; a literal of
   * megabytes would only cost its validation and a parameter the database compares with every row.
   */
  literalChars: 64 * 1024,
  /**
   * `$contains` and `$containsToken` in one query: each reads the text of its field in every row the
   * filter reaches (on PGlite, one statement at a time for every request), so a query of 20 over 5,000
   * calls held the database for half a minute. The weave UI sends a few.
   */
  textSearches: 10,
} as const;

/**
 * The weave query language (reference §3.8) and the calls filter and sort (§3.7). Each operation is an
 * object with exactly one key; `Query` allows no key but `$expr`.
 */

export const CONVERT_TARGETS = ['double', 'string', 'int', 'bool', 'exists'] as const;
export type ConvertTarget = (typeof CONVERT_TARGETS)[number];

export type Operand =
  | { $literal: JsonValue }
  | { $getField: string }
  | { $convert: { input: Operand; to: ConvertTarget } }
  | Operation;

export type Operation =
  | { $and: Operand[] }
  | { $or: Operand[] }
  | { $not: [Operand] }
  | { $eq: [Operand, Operand] }
  | { $gt: [Operand, Operand] }
  | { $gte: [Operand, Operand] }
  | { $lt: [Operand, Operand] }
  | { $lte: [Operand, Operand] }
  | { $in: [Operand, Operand[]] }
  | { $contains: { input: Operand; substr: Operand; case_insensitive?: boolean | null } }
  | { $containsToken: { input: Operand; substr: Operand; case_insensitive?: boolean | null } };

const JsonLiteral = z.json() as z.ZodType<JsonValue>;
/** A `$literal`: JSON of at most QUERY_LIMITS.literalChars characters, measured before it is validated as JSON. */
const Literal = z.preprocess((value, ctx) => {
  if (!jsonWithin(value, QUERY_LIMITS.literalChars)) {
    ctx.addIssue({ code: 'custom', message: `a $literal takes at most ${QUERY_LIMITS.literalChars} characters of JSON`, input: value });
  }
  return value;
}, JsonLiteral);

/**
 * Whether the value's JSON text has at most `max` characters (about: a number counts as its shortest
 * text), stopping as soon as it has more, so that a literal of millions of items costs no more than one
 * of `max` characters to refuse.
 */
function jsonWithin(value: unknown, max: number): boolean {
  let left = max;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item === 'string') left -= item.length + 2;
    else if (Array.isArray(item)) {
      left -= item.length + 1;
      if (left < 0) return false;
      for (const child of item) stack.push(child);
    } else if (item !== null && typeof item === 'object') {
      const keys = Object.keys(item);
      left -= keys.length + 1;
      for (const key of keys) {
        left -= key.length + 3;
        if (left < 0) return false;
        stack.push((item as Record<string, unknown>)[key]);
      }
    } else left -= String(item).length;
    if (left < 0) return false;
  }
  return true;
}

export const Operand: z.ZodType<Operand> = z.lazy(() =>
  z.union([
    z.strictObject({ $literal: Literal }),
    z.strictObject({ $getField: Key }),
    z.strictObject({ $convert: z.object({ input: Operand, to: z.enum(CONVERT_TARGETS) }) }),
    Operation,
  ]),
);

const pair = z.lazy(() => z.tuple([Operand, Operand]));

export const Operation: z.ZodType<Operation> = z.lazy(() =>
  z.union([
    z.strictObject({ $and: z.array(Operand).max(QUERY_LIMITS.listItems) }),
    z.strictObject({ $or: z.array(Operand).max(QUERY_LIMITS.listItems) }),
    z.strictObject({ $not: z.tuple([Operand]) }),
    z.strictObject({ $eq: pair }),
    z.strictObject({ $gt: pair }),
    z.strictObject({ $gte: pair }),
    z.strictObject({ $lt: pair }),
    z.strictObject({ $lte: pair }),
    z.strictObject({ $in: z.tuple([Operand, z.array(Operand).max(QUERY_LIMITS.listItems)]) }),
    z.strictObject({
      $contains: z.object({ input: Operand, substr: Operand, case_insensitive: z.boolean().nullish() }),
    }),
    z.strictObject({
      $containsToken: z.object({ input: Operand, substr: Operand, case_insensitive: z.boolean().nullish() }),
    }),
  ]),
);

// Recursive schemas are named so the OpenAPI document can reference them as components
// (#/components/schemas/Operation and Operand); an unnamed cycle would reference nothing.
z.globalRegistry.add(JsonLiteral, { id: 'JsonValue' });
z.globalRegistry.add(Operand, { id: 'Operand' });
z.globalRegistry.add(Operation, { id: 'Operation' });

export const Query = z.strictObject({ $expr: Operation }).superRefine((query, ctx) => {
  const size = measure(query.$expr);
  if (size.depth > QUERY_LIMITS.depth) {
    ctx.addIssue({ code: 'custom', path: ['$expr'], message: `the query nests ${size.depth} levels deep; at most ${QUERY_LIMITS.depth}` });
  } else if (size.operands > QUERY_LIMITS.operands) {
    ctx.addIssue({ code: 'custom', path: ['$expr'], message: `the query has ${size.operands} operands; at most ${QUERY_LIMITS.operands}` });
  } else if (size.textSearches > QUERY_LIMITS.textSearches) {
    ctx.addIssue({
      code: 'custom',
      path: ['$expr'],
      message: `the query has ${size.textSearches} text searches ($contains, $containsToken); at most ${QUERY_LIMITS.textSearches}, as each reads its field's text in every row`,
    });
  }
});

/** The operations that read a field's whole text in every row they test. */
const TEXT_SEARCHES = new Set(['$contains', '$containsToken']);

/** Depth, operand count and text searches of a parsed query (literal values count as one operand each). */
function measure(node: unknown): { depth: number; operands: number; textSearches: number } {
  let operands = 0;
  let deepest = 0;
  let textSearches = 0;
  const stack: { value: unknown; depth: number }[] = [{ value: node, depth: 1 }];
  while (stack.length > 0) {
    const { value, depth } = stack.pop()!;
    operands += 1;
    deepest = Math.max(deepest, depth);
    if (value === null || typeof value !== 'object' || '$literal' in value) continue;
    for (const key of Object.keys(value)) if (TEXT_SEARCHES.has(key)) textSearches += 1;
    for (const child of Object.values(value as Record<string, unknown>).flat()) {
      if (child !== null && typeof child === 'object') stack.push({ value: child, depth: depth + 1 });
    }
  }
  return { depth: deepest, operands, textSearches };
}

export type Query = z.infer<typeof Query>;

const ids = KeyList.nullish();

/** All optional; lists are IN lists, and an empty list filters nothing (the Python servers test truthiness). */
export const CallsFilter = z.object({
  op_names: ids,
  input_refs: ids,
  output_refs: ids,
  parent_ids: ids,
  trace_ids: ids,
  call_ids: ids,
  thread_ids: ids,
  turn_ids: ids,
  wb_user_ids: ids,
  wb_run_ids: ids,
  trace_roots_only: z.boolean().nullish(),
});
export type CallsFilter = z.infer<typeof CallsFilter>;

/** `direction` is checked when compiled, because a bad one is a 400 rather than a schema error. */
export const SortBy = z.object({ field: Key, direction: z.string().max(16) });
export type SortBy = z.infer<typeof SortBy>;

/** Validates a query taken from a body that was not schema-checked; a malformed one is a 400. */
export function parseQuery(input: unknown): Query {
  const result = Query.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const where = issue.path.length ? ` at ${issue.path.join('.')}` : '';
  // zod's union message is only "Invalid input"; say what was expected instead.
  const message = issue.code === 'invalid_union' ? 'not a valid operation or operand' : issue.message;
  throw new InvalidRequestError(`Invalid query${where}: ${message}`, { code: 'invalid_query' });
}
