import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { callItems, lines, post } from './helpers.js';

/**
 * Bounds on what one calls query may ask of the database (QUERY_LIMITS): a `$literal` of at most
 * 65,536 characters of JSON, at most 10 text searches ($contains, $containsToken), messages that show
 * at most 100 characters of a literal; and $containsToken's answers, the same whichever way it is compiled.
 */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('qbounds')}`;
const field = (name: string) => ({ $getField: name });
const literal = (value: unknown) => ({ $literal: value });

describe('a $literal', () => {
  it('of more than 65,536 characters of JSON is a 422 at the literal, showing at most 2,048 characters of it', async () => {
    const project = newProject();
    const big = 'x'.repeat(65_537);
    const query = { $expr: { $eq: [field('inputs.q'), literal(big)] } };
    const response = await post(app, user, '/calls/query', { project_id: project, query });
    expect(response.statusCode).toBe(422);
    const [detail, ...others] = response.json().detail;
    expect(others).toEqual([]);
    expect(detail).toMatchObject({ loc: ['body', 'query', '$expr', '$eq', 1, '$literal'], msg: 'Value error, a $literal takes at most 65536 characters of JSON' });
    expect(JSON.stringify(detail.input).length).toBeLessThan(2100);

    // A list literal of 70,000 items too (it would otherwise be validated item by item).
    const list = { $expr: { $in: [field('inputs.q'), [literal(Array.from({ length: 70_000 }, () => 1))]] } };
    const listed = await post(app, user, '/calls/stream_query', { project_id: project, query: list });
    expect(listed.statusCode).toBe(422);
    expect(listed.json().detail[0]).toMatchObject({ loc: ['body', 'query', '$expr', '$in', 1, 0, '$literal'], msg: 'Value error, a $literal takes at most 65536 characters of JSON' });

    // One at the bound is a query like any other.
    const atBound = { $expr: { $eq: [field('inputs.q'), literal('x'.repeat(65_534))] } };
    expect((await post(app, user, '/calls/query', { project_id: project, query: atBound })).json()).toEqual({ calls: [] });
  });

  it('that cannot be compared is named in the 400 by its first 100 characters and its length', async () => {
    const project = newProject();
    const text = 'y'.repeat(10_000);
    const query = { $expr: { $gt: [field('started_at'), literal(text)] } };
    const response = await post(app, user, '/calls/query', { project_id: project, query });
    expect([response.statusCode, response.json()]).toEqual([400, { reason: `Literal "${'y'.repeat(99)}… (10002 characters) cannot be compared as timestamptz` }]);
    const short = await post(app, user, '/calls/query', { project_id: project, query: { $expr: { $gt: [field('started_at'), literal('soon')] } } });
    expect(short.json()).toEqual({ reason: 'Literal "soon" cannot be compared as timestamptz' });
  });
});

describe('text searches', () => {
  const contains = (i: number) => ({ $contains: { input: field('inputs.q'), substr: literal(`w${i}`) } });
  const token = (i: number) => ({ $containsToken: { input: field('inputs.q'), substr: literal(`w${i}`), case_insensitive: true } });

  it('more than 10 in one query ($contains and $containsToken, at any depth) are a 422', async () => {
    const project = newProject();
    const eleven = { $expr: { $or: [contains(0), { $not: [token(1)] }, { $and: [...Array.from({ length: 9 }, (_, i) => token(i + 2))] }] } };
    const response = await post(app, user, '/calls/stream_query', { project_id: project, query: eleven });
    expect(response.statusCode).toBe(422);
    expect(response.json().detail).toEqual([
      expect.objectContaining({
        loc: ['body', 'query', '$expr'],
        msg: 'Value error, the query has 11 text searches ($contains, $containsToken); at most 10, as each reads its field\'s text in every row',
      }),
    ]);
    const ten = { $expr: { $or: Array.from({ length: 10 }, (_, i) => (i % 2 ? contains(i) : token(i))) } };
    expect((await post(app, user, '/calls/stream_query', { project_id: project, query: ten })).statusCode).toBe(200);
  });
});

/**
 * $containsToken's documented semantics (docs/tracing.md): `substr` is one of the tokens of `input`, split
 * on runs of ASCII characters that are not letters or digits; an empty token never matches; null in, null
 * out (so `$not` of it does not match either).
 */
function tokens(text: string): string[] {
  return text.split(/[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]+/);
}
function expected(input: string | null, needle: string | null, caseInsensitive: boolean): boolean | null {
  if (needle === '') return false;
  if (input === null || needle === null) return null;
  const fold = (t: string) => (caseInsensitive ? t.toLowerCase() : t);
  return tokens(fold(input)).includes(fold(needle));
}

describe('$containsToken', () => {
  it('answers as a split of the text into tokens would, for every kind of text and needle, with $not and null', async () => {
    const project = newProject();
    const texts = [
      'my-llm call', 'llmcall', 'LLM', 'the llm.', 'llm', '-llm-', 'a,b;c', 'über straße', 'x_y', 'x y', '', 'αβγ δ', 'tab\there',
      'line\nbreak', 'ends with llm', 'llm starts', 'a.b.c', 'dots...and...more', '{"json": "llm"}', '(paren)', 'llm2 llm',
      `${'long'.repeat(100)} tail`, 'price$5', 'back\\slash', 'émoji 🎉 party', 'Ünïcödé', 'MiXeD CaSe', 'llmllm',
    ];
    // display_name is the column a call without one reads as null; inputs.q the JSON path ('' when missing).
    const batch = texts.flatMap((q, i) => callItems(project, { id: `c${String(i).padStart(2, '0')}`, inputs: { q }, display_name: i % 5 === 0 ? undefined : q }));
    expect((await post(app, user, '/call/upsert_batch', { batch })).statusCode).toBe(200);
    const needles = [
      'llm', 'LLM', 'a', 'b', 'x_y', 'x y', 'y', '', 'straße', 'über', 'αβγ', 'δ', 'here', 'break', 'json', 'paren', '(paren)',
      'llm2', '5', 'slash', '🎉', 'ünïcödé', 'case', 'more', `${'long'.repeat(100)}`, `${'long'.repeat(100)} tail`, 'll',
    ];
    const stored = texts.map((q, i) => ({ id: `c${String(i).padStart(2, '0')}`, q, display: i % 5 === 0 ? null : q }));
    const ids = async (expr: unknown) => {
      const response = await post(app, user, '/calls/stream_query', { project_id: project, query: { $expr: expr }, columns: ['id'], sort_by: [{ field: 'id', direction: 'asc' }] });
      expect(response.statusCode, response.body).toBe(200);
      return lines(response.body).map((c) => c.id);
    };
    for (const needle of needles) {
      for (const caseInsensitive of [false, true]) {
        for (const [name, of] of [['inputs.q', (c: (typeof stored)[number]) => c.q], ['display_name', (c: (typeof stored)[number]) => c.display]] as const) {
          const op = { $containsToken: { input: field(name), substr: literal(needle), case_insensitive: caseInsensitive } };
          const answers = stored.map((c) => ({ id: c.id, answer: expected(of(c), needle, caseInsensitive) }));
          const label = `${name} ${JSON.stringify(needle)} ${caseInsensitive}`;
          expect(await ids(op), label).toEqual(answers.filter((a) => a.answer === true).map((a) => a.id));
          expect(await ids({ $not: [op] }), `not ${label}`).toEqual(answers.filter((a) => a.answer === false).map((a) => a.id));
        }
      }
    }
    // A needle read from a field: each call's display name as a token of its own inputs.q (both null on some).
    const own = { $containsToken: { input: field('inputs.q'), substr: field('display_name') } };
    const ownAnswers = stored.map((c) => ({ id: c.id, answer: expected(c.q, c.display, false) }));
    expect(await ids(own)).toEqual(ownAnswers.filter((a) => a.answer === true).map((a) => a.id));
    expect(await ids({ $not: [own] })).toEqual(ownAnswers.filter((a) => a.answer === false).map((a) => a.id));
  }, 120_000);
});
