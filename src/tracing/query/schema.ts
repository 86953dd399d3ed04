import { z } from 'zod';
import { InvalidRequestError } from '../../errors.js';
import type { JsonValue } from '../json.js';

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

export const Operand: z.ZodType<Operand> = z.lazy(() =>
  z.union([
    z.strictObject({ $literal: z.json() as z.ZodType<JsonValue> }),
    z.strictObject({ $getField: z.string() }),
    z.strictObject({ $convert: z.object({ input: Operand, to: z.enum(CONVERT_TARGETS) }) }),
    Operation,
  ]),
);

const pair = z.lazy(() => z.tuple([Operand, Operand]));

export const Operation: z.ZodType<Operation> = z.lazy(() =>
  z.union([
    z.strictObject({ $and: z.array(Operand) }),
    z.strictObject({ $or: z.array(Operand) }),
    z.strictObject({ $not: z.tuple([Operand]) }),
    z.strictObject({ $eq: pair }),
    z.strictObject({ $gt: pair }),
    z.strictObject({ $gte: pair }),
    z.strictObject({ $lt: pair }),
    z.strictObject({ $lte: pair }),
    z.strictObject({ $in: z.tuple([Operand, z.array(Operand)]) }),
    z.strictObject({
      $contains: z.object({ input: Operand, substr: Operand, case_insensitive: z.boolean().nullish() }),
    }),
    z.strictObject({
      $containsToken: z.object({ input: Operand, substr: Operand, case_insensitive: z.boolean().nullish() }),
    }),
  ]),
);

export const Query = z.strictObject({ $expr: Operation });
export type Query = z.infer<typeof Query>;

const ids = z.array(z.string()).nullish();

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
export const SortBy = z.object({ field: z.string(), direction: z.string() });
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
