import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';
import { UNSTORABLE_CHARACTER } from '../db/refusals.js';
import { LONE_SURROGATE_DETAIL, NUL_DETAIL, RequestValidationError } from './validation.js';

/** `\u005x`, `\u006x`, `\u007x`: the escapes secure-json-parse looks for in `__proto__` and `constructor` keys. */
const ESCAPED_KEY_LETTER = /\\u00[5-7]/;

/**
 * Whether JSON.parse alone reads the text as secure-json-parse does: no byte order mark for it to
 * strip, and no `__proto__` or `constructor` key it could drop. secure-json-parse only looks for such
 * keys when the text matches `"__proto__"\s*:` or `"constructor"\s*:` with any of their letters
 * possibly written as `\u00XX` escapes (all of them `\u005x`, `\u006x` or `\u007x`); a text holding
 * neither word and none of those escapes cannot match, and is parsed as is.
 */
export function isPlainJson(text: string): boolean {
  return (
    text.charCodeAt(0) !== 0xfeff &&
    !text.includes('__proto__') &&
    !text.includes('constructor') &&
    !(text.includes('\\u') && ESCAPED_KEY_LETTER.test(text))
  );
}

/**
 * JSON bodies parsed the way FastAPI reports them: invalid JSON is a 422 `json_invalid` detail with the
 * character position, an empty body is an absent body (the schema then reports it missing).
 * `__proto__` and `constructor.prototype` keys are dropped rather than trusted. `plain` is
 * `isPlainJson(text)`, for a caller that has it already.
 */
export function parseJsonBody(text: string, options: { rejectNul?: boolean; plain?: boolean } = {}): unknown {
  if (text.trim() === '') return undefined;
  let value: unknown;
  try {
    value = (options.plain ?? isPlainJson(text))
      ? JSON.parse(text)
      : secureJson.parse(text, undefined, { protoAction: 'remove', constructorAction: 'remove' });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const position = Number(/position (\d+)/.exec(message)?.[1] ?? text.length);
    throw new RequestValidationError([
      { type: 'json_invalid', loc: ['body', position], msg: 'JSON decode error', input: {}, ctx: { error: message } },
    ]);
  }
  // PostgreSQL text and JSONB cannot hold U+0000, nor a UTF-16 surrogate without its pair (the driver would
  // store U+FFFD in its place, or jsonb refuse it). Both reach a string only as a `\u` escape: the raw-text
  // tests are native scans, and only a body that has such an escape is walked to find the string (the escape
  // may be an escaped backslash's instead).
  if (options.rejectNul && text.includes('\\u0000')) {
    const loc = pathOf(value, ['body'], (s) => s.includes('\u0000'));
    if (loc) {
      throw new RequestValidationError([{ type: NUL_DETAIL.type, loc, msg: NUL_DETAIL.msg, input: null, ctx: NUL_DETAIL.ctx }]);
    }
  }
  if (options.rejectNul && SURROGATE_ESCAPE.test(text)) {
    const loc = pathOf(value, ['body'], (s) => UNSTORABLE_CHARACTER.test(s));
    if (loc) {
      const detail = LONE_SURROGATE_DETAIL;
      throw new RequestValidationError([{ type: detail.type, loc, msg: detail.msg, input: null, ctx: detail.ctx }]);
    }
  }
  return value;
}

/** Where in `value` the first string or key holding U+0000 or a lone UTF-16 surrogate is (PostgreSQL stores neither); undefined when none does. */
export function unstorableStringAt(value: unknown): (string | number)[] | undefined {
  return pathOf(value, [], (s) => UNSTORABLE_CHARACTER.test(s));
}

/** A `\uD800`-`\uDFFF` escape, in either case. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/** The location of the first string (or key) that `bad` holds true of, or undefined. */
function pathOf(value: unknown, path: (string | number)[], bad: (text: string) => boolean): (string | number)[] | undefined {
  if (typeof value === 'string') return bad(value) ? path : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = pathOf(value[i], [...path, i], bad);
      if (found) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (bad(key)) return [...path, key];
    const found = pathOf(item, [...path, key], bad);
    if (found) return found;
  }
  return undefined;
}

/**
 * Replaces Fastify's JSON parser in this plugin scope (and its children). `rejectNul` answers strings
 * holding U+0000 or a lone UTF-16 surrogate with a 422 naming the field, for routes that store what they
 * are sent.
 */
export function registerJsonBodyParser(app: FastifyInstance, options: { rejectNul?: boolean } = {}): void {
  if (app.hasContentTypeParser('application/json')) app.removeContentTypeParser('application/json');
  if (app.hasContentTypeParser('text/plain')) app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as string, options));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
