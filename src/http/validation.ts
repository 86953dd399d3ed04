import type { FastifySchemaCompiler } from 'fastify';
import { z } from 'zod';

/**
 * Request validation in FastAPI's form, which the training API's clients (and the seed) expect:
 * 422 {"detail":[{"loc":["body","field"],"msg":...,"type":...,"input":...,"ctx":...}]}.
 * zod's issue codes and messages are mapped to pydantic's, which clients compare as strings.
 */

export type Location = 'body' | 'query' | 'path' | 'header';

export interface ValidationDetail {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

/** U+0000, which PostgreSQL text and JSONB cannot hold: how a refused one is reported. */
export const NUL_DETAIL = {
  type: 'string_nul',
  msg: 'String should not contain the NUL character (\\u0000)',
  ctx: { error: 'PostgreSQL cannot store U+0000 in text' },
} as const;

/** pydantic's detail for text that is not Unicode: here a UTF-16 surrogate without its pair, sent as a `\u` escape. */
export const LONE_SURROGATE_DETAIL = {
  type: 'string_unicode',
  msg: 'Input should be a valid string, unable to parse raw data as a unicode string',
  ctx: { error: 'a UTF-16 surrogate escape without its pair is not Unicode text, and PostgreSQL cannot store it' },
} as const;

/** A string without U+0000, reported as `string_nul` like a NUL found in a JSON body. */
export function textWithoutNul() {
  return z
    .string()
    .refine((value) => !value.includes('\u0000'), { message: NUL_DETAIL.msg, params: { type: NUL_DETAIL.type, ctx: NUL_DETAIL.ctx } });
}

/** pydantic's detail for a string that does not match `pattern` (the regex's source). */
export function patternMismatch(loc: ValidationDetail['loc'], input: unknown, pattern: string): ValidationDetail {
  return { type: 'string_pattern_mismatch', loc, msg: `String should match pattern '${pattern}'`, input, ctx: { pattern } };
}

export class RequestValidationError extends Error {
  readonly statusCode = 422;
  readonly code = 'FST_ERR_VALIDATION';
  constructor(readonly detail: ValidationDetail[]) {
    super(detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; '));
    this.name = 'RequestValidationError';
  }
}

const PARTS: Record<string, Location> = { body: 'body', querystring: 'query', params: 'path', headers: 'header' };

/** Fastify's compiler hook: run the zod schema, and on failure hand the error handler FastAPI-form details. */
export const validatorCompiler: FastifySchemaCompiler<z.ZodType> =
  ({ schema, httpPart }) =>
  (data) => {
    const result = schema.safeParse(data);
    if (result.success) return { value: result.data };
    const location = PARTS[httpPart ?? 'body'] ?? 'body';
    return { error: new RequestValidationError(zodIssuesToDetail(result.error.issues, location, data)) };
  };

export function zodIssuesToDetail(issues: readonly z.core.$ZodIssue[], location: Location, data: unknown): ValidationDetail[] {
  // FastAPI's key order (type, loc, msg, input, ctx), for bodies that read the same as the reference's.
  // Stops at MAX_DETAILS: a body of a million unknown keys costs no more to answer than one of fifty.
  const details: ValidationDetail[] = [];
  for (const issue of issues) {
    if (details.length >= MAX_DETAILS) break;
    details.push(...issueToDetail(issue, [location], data).slice(0, MAX_DETAILS - details.length));
  }
  return details.map(({ type, loc, msg, ctx, input }) => {
    const shown = boundedInput(input);
    return ctx ? { type, loc, msg, input: shown, ctx } : { type, loc, msg, input: shown };
  });
}

/** Bounds on what an error echoes back: a 60 MB body with one missing field must not come back whole. */
const MAX_DETAILS = 50;
const MAX_INPUT_CHARS = 2048;
const MAX_INPUT_DEPTH = 32;

/** The input itself when small, else its JSON cut to MAX_INPUT_CHARS and marked with an ellipsis. */
export function boundedInput(value: unknown): unknown {
  let budget = MAX_INPUT_CHARS;
  const parts: string[] = [];
  const emit = (text: string) => {
    parts.push(text.slice(0, Math.max(budget, 0)));
    budget -= text.length;
    return budget >= 0;
  };
  // The gateway reads integers a double would change as BigInt, which JSON.stringify refuses.
  let holdsBigInt = false;
  const walk = (v: unknown, depth: number): boolean => {
    if (depth > MAX_INPUT_DEPTH) return false;
    if (typeof v === 'bigint') {
      holdsBigInt = true;
      return emit(v.toString());
    }
    if (v === null || typeof v !== 'object') return emit(JSON.stringify(v) ?? 'null');
    const entries = Array.isArray(v) ? v.map((item) => [undefined, item] as const) : Object.entries(v);
    if (!emit(Array.isArray(v) ? '[' : '{')) return false;
    for (let i = 0; i < entries.length; i++) {
      const [key, item] = entries[i];
      if (i > 0 && !emit(',')) return false;
      if (key !== undefined && !emit(`${JSON.stringify(key)}:`)) return false;
      if (!walk(item, depth + 1)) return false;
    }
    return emit(Array.isArray(v) ? ']' : '}');
  };
  if (!walk(value, 0)) return `${parts.join('')}…`;
  // An echo only: the nearest double of each big integer is close enough to show what was sent.
  return holdsBigInt ? JSON.parse(parts.join('')) : value;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let value = root;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

function has(root: unknown, path: readonly PropertyKey[]): boolean {
  if (path.length === 0) return root !== undefined && root !== null;
  const parent = valueAt(root, path.slice(0, -1));
  return parent !== null && typeof parent === 'object' && Object.hasOwn(parent, path[path.length - 1]);
}

const TYPE_NAMES: Record<string, [type: string, msg: string]> = {
  string: ['string_type', 'Input should be a valid string'],
  number: ['float_type', 'Input should be a valid number'],
  int: ['int_type', 'Input should be a valid integer'],
  bigint: ['int_type', 'Input should be a valid integer'],
  boolean: ['bool_type', 'Input should be a valid boolean'],
  array: ['list_type', 'Input should be a valid list'],
  object: ['dict_type', 'Input should be a valid dictionary'],
  record: ['dict_type', 'Input should be a valid dictionary'],
  map: ['dict_type', 'Input should be a valid dictionary'],
  null: ['none_required', 'Input should be None'],
  date: ['datetime_type', 'Input should be a valid datetime'],
};

function literal(value: unknown): string {
  return typeof value === 'string' ? `'${value}'` : JSON.stringify(value);
}

function orList(values: readonly unknown[]): string {
  const shown = values.map(literal);
  return shown.length <= 1 ? (shown[0] ?? '') : `${shown.slice(0, -1).join(', ')} or ${shown[shown.length - 1]}`;
}

function issueToDetail(issue: z.core.$ZodIssue, prefix: (string | number)[], data: unknown): ValidationDetail[] {
  const path = issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p));
  const loc = [...prefix, ...path];
  // data is relative to the prefix's root (the body, the query object, ...); nested unions pass sub-roots.
  const input = valueAt(data, path);
  const base = { loc, input };

  switch (issue.code) {
    case 'invalid_type': {
      if (!has(data, path) || (path.length === 0 && (data === undefined || data === null) && issue.expected !== 'null')) {
        // pydantic reports a missing field with the object that lacks it as the input.
        return [{ type: 'missing', loc, msg: 'Field required', input: path.length ? valueAt(data, path.slice(0, -1)) : null }];
      }
      const [type, msg] = TYPE_NAMES[issue.expected] ?? ['type_error', `Input should be a valid ${issue.expected}`];
      if (issue.expected === 'int' && typeof input === 'number') {
        return [{ ...base, type: 'int_from_float', msg: 'Input should be a valid integer, got a number with a fractional part' }];
      }
      return [{ ...base, type, msg }];
    }
    case 'too_small': {
      const n = Number(issue.minimum);
      if (issue.origin === 'string') {
        return [{ ...base, type: 'string_too_short', msg: `String should have at least ${n} character${n === 1 ? '' : 's'}`, ctx: { min_length: n } }];
      }
      if (issue.origin === 'array' || issue.origin === 'set') {
        const actual = Array.isArray(input) ? input.length : undefined;
        return [{ ...base, type: 'too_short', msg: `List should have at least ${n} item${n === 1 ? '' : 's'} after validation, not ${actual}`, ctx: { field_type: 'List', min_length: n, actual_length: actual } }];
      }
      return issue.inclusive
        ? [{ ...base, type: 'greater_than_equal', msg: `Input should be greater than or equal to ${n}`, ctx: { ge: n } }]
        : [{ ...base, type: 'greater_than', msg: `Input should be greater than ${n}`, ctx: { gt: n } }];
    }
    case 'too_big': {
      const n = Number(issue.maximum);
      if (issue.origin === 'string') {
        return [{ ...base, type: 'string_too_long', msg: `String should have at most ${n} character${n === 1 ? '' : 's'}`, ctx: { max_length: n } }];
      }
      if (issue.origin === 'array' || issue.origin === 'set') {
        const actual = Array.isArray(input) ? input.length : undefined;
        return [{ ...base, type: 'too_long', msg: `List should have at most ${n} item${n === 1 ? '' : 's'} after validation, not ${actual}`, ctx: { field_type: 'List', max_length: n, actual_length: actual } }];
      }
      return issue.inclusive
        ? [{ ...base, type: 'less_than_equal', msg: `Input should be less than or equal to ${n}`, ctx: { le: n } }]
        : [{ ...base, type: 'less_than', msg: `Input should be less than ${n}`, ctx: { lt: n } }];
    }
    case 'invalid_value': {
      const expected = orList(issue.values);
      return [{ ...base, type: 'literal_error', msg: `Input should be ${expected}`, ctx: { expected } }];
    }
    case 'invalid_format': {
      if (issue.format === 'uuid' || issue.format === 'guid') {
        return [{ ...base, type: 'uuid_parsing', msg: 'Input should be a valid UUID', ctx: { error: issue.message } }];
      }
      if (issue.format === 'regex' && 'pattern' in issue) {
        // zod gives the regex as a literal (`/^a$/`); pydantic names its source alone.
        const literal = String(issue.pattern);
        const pattern = /^\/(.*)\/[a-z]*$/s.exec(literal)?.[1] ?? literal;
        return [patternMismatch(loc, input, pattern)];
      }
      return [{ ...base, type: 'value_error', msg: `Value error, ${issue.message}`, ctx: { error: issue.message } }];
    }
    case 'not_multiple_of': {
      const n = Number(issue.divisor);
      return [{ ...base, type: 'multiple_of', msg: `Input should be a multiple of ${n}`, ctx: { multiple_of: n } }];
    }
    case 'invalid_key': {
      // pydantic names a bad dict key at `[..., key, '[key]']`, with the key as the input.
      const key = path[path.length - 1];
      return issue.issues.flatMap((inner) => issueToDetail({ ...inner, path: [] } as z.core.$ZodIssue, [...loc, '[key]'], key));
    }
    case 'unrecognized_keys':
      return issue.keys.slice(0, MAX_DETAILS).map((key) => ({
        type: 'extra_forbidden',
        loc: [...loc, key],
        msg: 'Extra inputs are not permitted',
        input: valueAt(data, [...path, key]),
      }));
    case 'invalid_union': {
      if (issue.errors.length === 0) {
        return [{ ...base, type: 'value_error', msg: `Value error, ${issue.message}`, ctx: { error: issue.message } }];
      }
      // Report the branch that came closest (fewest problems), as a reader fixes one shape, not all.
      const best = [...issue.errors].sort((a, b) => a.length - b.length)[0];
      return best.flatMap((inner) => issueToDetail(inner, loc, input));
    }
    case 'custom': {
      // A refinement may name its pydantic-style type: `{ params: { type: 'string_nul', ctx } }`.
      const params = issue.params as { type?: unknown; ctx?: Record<string, unknown> } | undefined;
      if (typeof params?.type === 'string') return [{ ...base, type: params.type, msg: issue.message, ...(params.ctx ? { ctx: params.ctx } : {}) }];
      return [{ ...base, type: 'value_error', msg: `Value error, ${issue.message}`, ctx: { error: issue.message } }];
    }
    default:
      return [{ ...base, type: 'value_error', msg: `Value error, ${issue.message}`, ctx: { error: issue.message } }];
  }
}
