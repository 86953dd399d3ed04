import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';
import { NUL_DETAIL, RequestValidationError } from './validation.js';

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
  // PostgreSQL text and JSONB cannot hold U+0000. The raw-text test is a native scan; only a body that
  // has the escape somewhere is walked to find the string (it may be an escaped backslash instead).
  if (options.rejectNul && text.includes('\\u0000')) {
    const loc = nulPath(value, ['body']);
    if (loc) {
      throw new RequestValidationError([{ type: NUL_DETAIL.type, loc, msg: NUL_DETAIL.msg, input: null, ctx: NUL_DETAIL.ctx }]);
    }
  }
  return value;
}

/** The location of the first string (or key) holding U+0000, or undefined. */
function nulPath(value: unknown, path: (string | number)[]): (string | number)[] | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? path : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nulPath(value[i], [...path, i]);
      if (found) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (key.includes('\u0000')) return [...path, key];
    const found = nulPath(item, [...path, key]);
    if (found) return found;
  }
  return undefined;
}

/**
 * Replaces Fastify's JSON parser in this plugin scope (and its children). `rejectNul` answers strings
 * holding U+0000 with a 422 naming the field, for routes that store what they are sent.
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
