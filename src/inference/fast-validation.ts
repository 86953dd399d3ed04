import type { FastifySchemaCompiler } from 'fastify';
import { validatorCompiler } from '../http/validation.js';
import { CHAT_FIELDS, COMPLETION_FIELDS, GREEDY_EPSILON, LIST_MAX, NAME_MAX, TEXT_MAX } from './schemas.js';

/**
 * A hand-written accept path for the common chat and text completion bodies (a model, plain
 * `{role, content}` messages or a text prompt, and the usual sampling scalars in their plain types),
 * which zod checks several times slower. It accepts a body only where the zod schema accepts it and
 * its output has the input's fields and values: no default added, nothing transformed or coerced.
 * Lax coercion and held integers (exact-json.ts) have run before, as before zod. Everything else
 * (an unknown key, a null, another type, anything near a cross-field rule) returns undefined, and goes
 * through the schema as before, errors included. test/inference/fast-validation.test.ts checks it
 * against the schema.
 */

type Check = (value: unknown) => boolean;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const string = (min: number, max: number): Check => (value) => typeof value === 'string' && value.length >= min && value.length <= max;
const integer = (min: number): Check => (value) => Number.isSafeInteger(value) && (value as number) >= min;
/** A number in [min, max]; NaN fails both comparisons, and zod refuses it too. */
const between = (min: number, max: number): Check => (value) => typeof value === 'number' && value >= min && value <= max;
const boolean: Check = (value) => typeof value === 'boolean';

const name = string(0, NAME_MAX);
const stopString = string(1, NAME_MAX);
const role = name;
const content = string(0, TEXT_MAX);

/** `{role, content}` (content optional), keys in the schema's order. */
const message: Check = (value) => {
  if (!isObject(value)) return false;
  let first = true;
  for (const key in value) {
    if (key === 'role' ? !first || !role(value.role) : key !== 'content' || !content(value.content)) return false;
    first = false;
  }
  return value.role !== undefined;
};

const messages: Check = (value) => {
  if (!Array.isArray(value) || value.length === 0 || value.length > LIST_MAX) return false;
  for (let i = 0; i < value.length; i++) if (!message(value[i])) return false;
  return true;
};

const stop: Check = (value) => {
  if (typeof value === 'string') return stopString(value);
  if (!Array.isArray(value) || value.length > LIST_MAX) return false;
  for (let i = 0; i < value.length; i++) if (!stopString(value[i])) return false;
  return true;
};

/** `{include_usage, continuous_usage_stats}`, booleans, either optional, in that order. */
const streamOptions: Check = (value) => {
  if (!isObject(value)) return false;
  let last = '';
  for (const key in value) {
    if (key === 'include_usage' ? last !== '' : key !== 'continuous_usage_stats') return false;
    if (!boolean(value[key])) return false;
    last = key;
  }
  return true;
};

/** The fields both schemas share, with the plain forms taken here (`nullable` ones: never null). */
const SAMPLING: Record<string, Check> = {
  model: string(1, NAME_MAX),
  max_tokens: integer(1),
  n: integer(1),
  seed: integer(Number.MIN_SAFE_INTEGER),
  temperature: between(0, 2),
  top_p: (value) => typeof value === 'number' && value > 0 && value <= 1,
  top_k: integer(-1),
  min_p: between(0, 1),
  frequency_penalty: between(-2, 2),
  presence_penalty: between(-2, 2),
  stop,
  stream: boolean,
  stream_options: streamOptions,
  user: name,
};

interface Field {
  /** The field's place in the schema, which zod's output follows. */
  order: number;
  check: Check;
}

function fields(order: readonly string[], checks: Record<string, Check>): Map<string, Field> {
  const map = new Map<string, Field>();
  for (const [key, check] of Object.entries(checks)) {
    const index = order.indexOf(key);
    if (index < 0) throw new Error(`fast validation: ${key} is not a field of the schema`);
    map.set(key, { order: index, check });
  }
  return map;
}

const CHAT = fields(CHAT_FIELDS, { ...SAMPLING, messages, logprobs: boolean, max_completion_tokens: integer(1) });
const COMPLETION = fields(COMPLETION_FIELDS, { ...SAMPLING, prompt: content, logprobs: integer(-1), echo: boolean });

/**
 * The fast path's outputs: objects whose class says that the fast path made them (marking them in a
 * WeakSet would cost more than the whole check). Their fields are own ones, as JSON.parse's are; the
 * prototype holds nothing else.
 */
class FastBody {}

/** Keys of the body being checked, in the schema's order; reused (the check is synchronous). */
const slots: (string | undefined)[] = [];

/**
 * The body as the schema would output it (a FastBody with the body's fields, in the schema's order
 * as zod's output has them, which the engine body's key order follows), or undefined for the schema
 * to decide.
 */
function accept(body: unknown, known: Map<string, Field>, required: string): Record<string, unknown> | undefined {
  if (!isObject(body)) return undefined;
  let first = Infinity;
  let last = -1;
  try {
    for (const key in body) {
      const field = known.get(key);
      if (field === undefined || !field.check(body[key])) return undefined;
      slots[field.order] = key;
      if (field.order < first) first = field.order;
      if (field.order > last) last = field.order;
    }
    if (body.model === undefined || body[required] === undefined) return undefined;
    // The cross-field rules the fields above can meet (schemas.ts crossFieldRules).
    if (body.stream_options !== undefined && body.stream !== true && Object.keys(body.stream_options as object).length > 0) return undefined;
    if (body.n !== undefined && (body.n as number) > 1 && body.temperature !== undefined && (body.temperature as number) < GREEDY_EPSILON) return undefined;
    const out = new FastBody() as Record<string, unknown>;
    for (let i = first; i <= last; i++) {
      const key = slots[i];
      if (key !== undefined) out[key] = body[key];
    }
    return out;
  } finally {
    for (let i = first; i <= last; i++) slots[i] = undefined;
  }
}

export const fastChatBody = (body: unknown) => accept(body, CHAT, 'messages');
export const fastCompletionBody = (body: unknown) => accept(body, COMPLETION, 'prompt');

/** Whether the fast path validated the body: the schema would have output the same fields and values. */
export function validatedFast(body: unknown): boolean {
  return body instanceof FastBody;
}

/**
 * The app's validator compiler with the fast path in front of a body schema. The route keeps its
 * schema (OpenAPI documents it); only bodies the fast path does not take reach zod.
 */
export function fastValidatorCompiler(fast: (body: unknown) => Record<string, unknown> | undefined): FastifySchemaCompiler<unknown> {
  return (route) => {
    // A route's own compiler is typed over its whole schema; it is called with one part's (a zod schema).
    const full = validatorCompiler(route as Parameters<typeof validatorCompiler>[0]);
    if (route.httpPart !== 'body') return full;
    return (data) => {
      const value = fast(data);
      return value === undefined ? full(data) : { value };
    };
  };
}
