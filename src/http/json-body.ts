import type { FastifyInstance, FastifyRequest } from 'fastify';
import secureJson from 'secure-json-parse';
import { UNSTORABLE_CHARACTER } from '../db/refusals.js';
import { decodeJsonText, registerContentCodingCheck } from './body-encoding.js';
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

/** A `\u0000` escape, or a `\uD800`-`\uDFFF` one in either case. */
const UNSTORABLE_ESCAPE = /\\u(?:0000|[dD][89a-fA-F])/;

/**
 * Whether a JSON text can parse to a string (or key) holding U+0000 or a lone UTF-16 surrogate: only with
 * a `\u0000` or `\uD800`-`\uDFFF` escape, since JSON refuses a raw U+0000 and a body decoded from UTF-8
 * holds no lone surrogate. A native scan of the text; true may be an escaped backslash's `\u` instead.
 */
export function mayHoldUnstorable(text: string): boolean {
  return text.includes('\\u') && UNSTORABLE_ESCAPE.test(text);
}

/** Requests whose JSON body `registerJsonBodyParser` parsed from a text that `mayHoldUnstorable` clears. */
const storableBodies = new WeakSet<FastifyRequest>();

/**
 * Whether a request's body may hold a string with U+0000 or a lone surrogate: false only for a body that
 * `registerJsonBodyParser` parsed from a text without their escapes, so a caller can skip walking it.
 */
export function bodyMayHoldUnstorable(request: FastifyRequest): boolean {
  return !storableBodies.has(request);
}

/** The location of the first string (or key) that `bad` holds true of, or undefined. */
function pathOf(value: unknown, prefix: readonly (string | number)[], bad: (text: string) => boolean): (string | number)[] | undefined {
  if (typeof value === 'string') return bad(value) ? [...prefix] : undefined;
  let found: (string | number)[] | undefined;
  walkJson(value, (item, path) => {
    // An object's keys are strings, an array's indexes numbers: only an object's key is text.
    const key = path[path.length - 1];
    if ((typeof key === 'string' && bad(key)) || (typeof item === 'string' && bad(item))) found = [...prefix, ...path];
    return found !== undefined;
  });
  return found;
}

/**
 * Visits each value nested in `root` (not `root` itself) in the order a recursive walk takes: a value
 * before what it holds, an array's items in order, an object's entries in `Object.keys` order. `path` is
 * the keys from `root` to the value (numbers in arrays, strings in objects), and `parent` holds the value
 * at its last key. `path` is one array for the whole walk, changed after each call: a visitor that keeps it
 * copies it. So a walk costs one step per value whatever the depth (copying the path at every value cost
 * depth × values: seconds for a body a few thousand levels deep), and, being iterative, any depth
 * is walked without overflowing the call stack. A visitor returning true stops the walk, which then
 * returns true.
 */
export function walkJson(
  root: unknown,
  visit: (value: unknown, path: readonly (string | number)[], parent: Record<string | number, unknown>) => boolean | void,
): boolean {
  if (root === null || typeof root !== 'object') return false;
  const path: (string | number)[] = [];
  // One frame per object or array being walked: it, its keys (none for an array), the next entry.
  const parents: Record<string | number, unknown>[] = [root as Record<string | number, unknown>];
  const keyLists: (string[] | undefined)[] = [Array.isArray(root) ? undefined : Object.keys(root)];
  const next: number[] = [0];
  while (parents.length > 0) {
    const top = parents.length - 1;
    const parent = parents[top];
    const keys = keyLists[top];
    const index = next[top]++;
    if (index >= (keys ? keys.length : (parent as unknown as unknown[]).length)) {
      parents.pop();
      keyLists.pop();
      next.pop();
      path.pop(); // the key of the object or array just walked (none for root's)
      continue;
    }
    const key = keys ? keys[index] : index;
    const value = parent[key];
    path.push(key);
    if (visit(value, path, parent) === true) return true;
    if (value !== null && typeof value === 'object') {
      parents.push(value as Record<string | number, unknown>);
      keyLists.push(Array.isArray(value) ? undefined : Object.keys(value));
      next.push(0);
    } else {
      path.pop();
    }
  }
  return false;
}

/**
 * Replaces Fastify's JSON parser in this plugin scope (and its children). `rejectNul` answers strings
 * holding U+0000 or a lone UTF-16 surrogate with a 422 naming the field, for routes that store what they
 * are sent. Bodies are read as UTF-8 text (body-encoding.ts: a charset but UTF-8 is a 415, bytes that are
 * not UTF-8 a 422 `json_invalid`), and, called on the root, this also refuses content codings on every
 * route (`registerContentCodingCheck`).
 */
export function registerJsonBodyParser(app: FastifyInstance, options: { rejectNul?: boolean } = {}): void {
  registerContentCodingCheck(app);
  if (app.hasContentTypeParser('application/json')) app.removeContentTypeParser('application/json');
  if (app.hasContentTypeParser('text/plain')) app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    // A request for no route answers 404 whatever it sent: parsing up to BODY_LIMIT_MB of JSON that no
    // handler will read would be work anyone could ask for, with or without a key.
    if (request.is404) return done(null, undefined);
    try {
      const text = decodeJsonText(request, body as Buffer, 'json_invalid');
      const value = parseJsonBody(text, options);
      if (!mayHoldUnstorable(text)) storableBodies.add(request);
      done(null, value);
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
