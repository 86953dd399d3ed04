import Fastify from 'fastify';
import { parse } from 'graphql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../../src/app.js';
import { UNSTORABLE_CHARACTER } from '../../src/db/refusals.js';
import { unstorableString } from '../../src/graphql/plugin.js';
import { bodyMayHoldUnstorable, mayHoldUnstorable, registerJsonBodyParser } from '../../src/http/json-body.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';

/**
 * U+0000 and lone surrogates reach a GraphQL variable only as `\u0000` or `\uD800`-`\uDFFF` escapes in the
 * body's text, so a body without one has its variables left unwalked, however large (a 10M-element unused
 * variable once cost 22 s of CPU). These tests count what is walked, never time it.
 */

/** `value` behind a proxy that counts every look at it or anything in it. */
function watched<T extends object>(value: T): { value: T; looks: () => number } {
  let looks = 0;
  const wrap = (target: object): object =>
    new Proxy(target, {
      get(t, key, receiver) {
        looks++;
        const item = Reflect.get(t, key, receiver);
        return item !== null && typeof item === 'object' ? wrap(item) : item;
      },
      ownKeys(t) {
        looks++;
        return Reflect.ownKeys(t);
      },
      getOwnPropertyDescriptor(t, key) {
        looks++;
        return Reflect.getOwnPropertyDescriptor(t, key);
      },
    });
  return { value: wrap(value) as T, looks: () => looks };
}

describe('the raw text decides whether variables are walked', () => {
  it('finds the escapes that can make an unstorable string, in either case', () => {
    for (const text of ['"a\\u0000"', '"\\ud800"', '"\\uDBFF"', '"\\uDc00"', '"\\ud83d\\ude00"', '"\\\\u0000"']) expect(mayHoldUnstorable(text), text).toBe(true);
    for (const text of ['"a"', '"\\u0041"', '"\\u00e9"', '"\\uD7FF"', '"\\uE000"', 'u0000', '"\\n\\t"']) expect(mayHoldUnstorable(text), text).toBe(false);
  });

  it('notes per request whether the parsed body may hold one; a body it did not parse may', async () => {
    const app = Fastify();
    registerJsonBodyParser(app);
    app.post('/', async (request) => ({ may: bodyMayHoldUnstorable(request) }));
    const may = async (payload: string) =>
      (await app.inject({ method: 'POST', url: '/', headers: { 'content-type': 'application/json' }, payload })).json().may;
    expect(await may('{"v": [1, "a", {"k": "\\u0041"}]}')).toBe(false);
    expect(await may('{"v": "a\\u0000"}')).toBe(true);
    expect(await may('{"v": "\\uDC00"}')).toBe(true);
    await app.close();
    expect(bodyMayHoldUnstorable({} as never)).toBe(true);
  });

  it('leaves the variables untouched when the text has no such escape', () => {
    const document = parse('query($a: String) { viewer { username } }');
    const unused = watched({ a: 'x', big: Array.from({ length: 1000 }, (_, i) => ({ [`k${i}`]: ['\u0000'] })) });
    expect(unstorableString(document, unused.value, false)).toBeUndefined();
    expect(unused.looks()).toBe(0);
    // A string in the document is still found: a GraphQL `\u{0}` escape is no JSON `\u0000`.
    expect(unstorableString(parse('{ viewer(x: "\\u{0}") { username } }'), unused.value, false)).toBe(
      'A string in the query holds U+0000, which is not text that can be stored; remove it.',
    );
    expect(unused.looks()).toBe(0);
  });

  it('walks them when it may, naming the first unstorable string or key as before', () => {
    const document = parse('{ viewer { username } }');
    const message = (where: string, what = 'U+0000') => `${where} holds ${what}, which is not text that can be stored; remove it.`;
    expect(unstorableString(document, { a: 'ok', b: [1, { c: ['x', 'y\u0000'] }] })).toBe(message('Variable $b[1].c[1]'));
    expect(unstorableString(document, { a: { 'k.\u0000': 1 } })).toBe(message('A key of variable $a'));
    expect(unstorableString(document, { a: [{ b: { 'k\udc00': 'x\u0000' } }] })).toBe(message('A key of variable $a[0].b', 'a lone UTF-16 surrogate (U+DC00)'));
    expect(unstorableString(document, { s: '\ud800' })).toBe(message('Variable $s', 'a lone UTF-16 surrogate (U+D800)'));
    // A variable's name is no stored text.
    expect(unstorableString(document, { 'n\u0000': 'ok' })).toBeUndefined();
    expect(unstorableString(document, { pair: '\ud83d\ude00', n: null, x: 1 })).toBeUndefined();
  });
});

describe('POST /graphql with a large unused variable', () => {
  let app: App;
  let user: TestUser;
  beforeAll(async () => {
    app = await createTestApp();
    user = await createUserWithKey(app);
  });
  afterAll(async () => {
    await app.close();
  });

  const post = (payload: string) =>
    app.inject({ method: 'POST', url: '/graphql', headers: { ...user.headers, 'content-type': 'application/json' }, payload });

  /** How many strings the request tests for unstorable characters, and its answer. */
  async function tested(payload: string): Promise<{ tests: number; answer: unknown }> {
    const test = vi.spyOn(UNSTORABLE_CHARACTER, 'test');
    const exec = vi.spyOn(UNSTORABLE_CHARACTER, 'exec');
    try {
      const response = await post(payload);
      return { tests: test.mock.calls.length + exec.mock.calls.length, answer: response.json() };
    } finally {
      test.mockRestore();
      exec.mockRestore();
    }
  }

  const body = (unused: unknown) => JSON.stringify({ query: '{ viewer { username } }', variables: { unused } });

  it('does the same work for 10 elements as for 100,000 when the text has no escape', async () => {
    const small = await tested(body(Array.from({ length: 10 }, (_, i) => ({ k: `v${i}` }))));
    const large = await tested(body(Array.from({ length: 100_000 }, (_, i) => ({ k: `v${i}` }))));
    expect(large.answer).toEqual({ data: { viewer: { username: user.username } } });
    expect(small.answer).toEqual(large.answer);
    expect(large.tests).toBe(small.tests);
  });

  it('still refuses an unstorable string in an unused variable, whatever the case of its escape', async () => {
    const nul = await tested(body([0, 'a\u0000']));
    expect(nul.answer).toEqual({ errors: [{ message: 'Variable $unused[1] holds U+0000, which is not text that can be stored; remove it.' }] });
    const upper = await tested('{"query": "{ viewer { username } }", "variables": {"unused": {"k": "\\uDC00"}}}');
    expect(upper.answer).toEqual({
      errors: [{ message: 'Variable $unused.k holds a lone UTF-16 surrogate (U+DC00), which is not text that can be stored; remove it.' }],
    });
  });
});
