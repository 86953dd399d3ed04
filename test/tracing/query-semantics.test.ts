import { beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { callItems, lines, post, type CallSpec } from './helpers.js';

/** weave's query semantics: feedback fields, filters through expanded refs, $not and NULL. */

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('sem')}`;
const f = (path: string) => ({ $getField: path });
const l = (value: unknown) => ({ $literal: value });

async function ingest(project: string, specs: CallSpec[]): Promise<void> {
  const response = await post(app, user, '/call/upsert_batch', { batch: specs.flatMap((s) => callItems(project, s)) });
  expect(response.statusCode, response.body).toBe(200);
}

async function ids(project: string, body: Record<string, unknown>): Promise<unknown[]> {
  const response = await post(app, user, '/calls/stream_query', { project_id: project, ...body });
  expect(response.statusCode, response.body).toBe(200);
  const viaQuery = await post(app, user, '/calls/query', { project_id: project, ...body });
  expect(viaQuery.statusCode, viaQuery.body).toBe(200);
  const streamed = lines(response.body).map((c) => c.id);
  expect(viaQuery.json().calls.map((c: { id: string }) => c.id)).toEqual(streamed);
  return streamed;
}

async function count(project: string, body: Record<string, unknown>): Promise<number> {
  const response = await post(app, user, '/calls/query_stats', { project_id: project, ...body });
  expect(response.statusCode, response.body).toBe(200);
  return response.json().count;
}

async function feedback(project: string, callId: string, type: string, payload: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const response = await post(app, user, '/feedback/create', { project_id: project, weave_ref: `weave:///${project}/call/${callId}`, feedback_type: type, payload, ...extra });
  expect(response.statusCode, response.body).toBe(200);
}

describe('feedback fields in calls queries', () => {
  let project: string;
  beforeAll(async () => {
    project = newProject();
    await ingest(project, [{ id: 'a' }, { id: 'b' }, { id: 'c' }, { id: 'd' }]);
    await feedback(project, 'a', 'wandb.reaction.1', { emoji: '👍' });
    await feedback(project, 'b', 'wandb.reaction.1', { emoji: '👎' });
    await feedback(project, 'c', 'wandb.reaction.1', { emoji: '👍' });
    await feedback(project, 'a', 'score', { value: 3, label: 'mid' });
    await feedback(project, 'b', 'score', { value: 10, label: 'high' });
    await feedback(project, 'c', 'score', { value: 1, label: 'low' });
    // A newer score for c: the newest feedback of a type is the one a query reads.
    await feedback(project, 'c', 'score', { value: 7, label: 'better' });
  });

  it('filters on a reaction\'s emoji', async () => {
    const expr = { $eq: [f('feedback.[wandb.reaction.1].payload.emoji'), l('👍')] };
    expect(await ids(project, { query: { $expr: expr } })).toEqual(['a', 'c']);
    expect(await count(project, { query: { $expr: expr } })).toBe(2);
  });

  it('sorts by a feedback value, calls without that feedback last', async () => {
    expect(await ids(project, { sort_by: [{ field: 'feedback.[score].payload.value', direction: 'desc' }] })).toEqual(['b', 'c', 'a', 'd']);
    expect(await ids(project, { sort_by: [{ field: 'feedback.[score].payload.value', direction: 'asc' }] })).toEqual(['a', 'c', 'b', 'd']);
  });

  it('compares feedback values as numbers with $convert and reads [*] across types', async () => {
    const gt = { $gt: [{ $convert: { input: f('feedback.[score].payload.value'), to: 'double' } }, l(5)] };
    expect(await ids(project, { query: { $expr: gt } })).toEqual(['b', 'c']);
    expect(await ids(project, { query: { $expr: { $eq: [f('feedback.[*].payload.label'), l('mid')] } } })).toEqual(['a']);
  });

  it('refuses malformed feedback fields with 403, as weave does', async () => {
    for (const field of ['feedback.payload.x', 'feedback.[score].note', 'feedback.[score]']) {
      const response = await post(app, user, '/calls/query', { project_id: project, query: { $expr: { $eq: [f(field), l(1)] } } });
      expect(response.statusCode).toBe(403);
      expect(response.json().reason).toMatch(/^Invalid field "feedback/);
    }
  });

  it('reads runnable_ref of runnable feedback', async () => {
    const p = newProject();
    await ingest(p, [{ id: 'x' }, { id: 'y' }]);
    const scorer = `weave:///${p}/object/scorer:abc`;
    await feedback(p, 'x', 'wandb.runnable.scorer', { output: 1 }, { runnable_ref: scorer });
    expect(await ids(p, { query: { $expr: { $eq: [f('feedback.[wandb.runnable.scorer].runnable_ref'), l(scorer)] } } })).toEqual(['x']);
  });
});

describe('filters and sorts through expanded refs', () => {
  let project: string;
  beforeAll(async () => {
    project = newProject();
    const ref = async (objectId: string, val: unknown) => {
      const response = await post(app, user, '/obj/create', { obj: { project_id: project, object_id: objectId, val } });
      expect(response.statusCode, response.body).toBe(200);
      return `weave:///${project}/object/${objectId}:${response.json().digest}`;
    };
    const prompt = await ref('prompt', { text: 'be brief' });
    const small = await ref('model', { max_tokens: 100, prompt });
    const large = await ref('model', { max_tokens: 2000, prompt: 'plain' });
    await ingest(project, [
      { id: 'a', inputs: { model: small } },
      { id: 'b', inputs: { model: large } },
      { id: 'c', inputs: { model: 'not a ref' } },
      { id: 'd', inputs: {} },
    ]);
  });

  const above = (n: number) => ({ $expr: { $gt: [{ $convert: { input: f('inputs.model.max_tokens'), to: 'double' } }, l(n)] } });

  it('matches calls whose referenced object has the value, in queries and query_stats', async () => {
    expect(await ids(project, { query: above(500), expand_columns: ['inputs.model'] })).toEqual(['b']);
    expect(await ids(project, { query: above(50), expand_columns: ['inputs.model'] })).toEqual(['a', 'b']);
    expect(await count(project, { query: above(500), expand_columns: ['inputs.model'] })).toBe(1);
    // Without expand_columns the path reads the call's own inputs, where the ref is a string.
    expect(await ids(project, { query: above(500) })).toEqual([]);
  });

  it('reads through nested refs when each level is expanded', async () => {
    const expr = { $eq: [f('inputs.model.prompt.text'), l('be brief')] };
    expect(await ids(project, { query: { $expr: expr }, expand_columns: ['inputs.model', 'inputs.model.prompt'] })).toEqual(['a']);
    expect(await ids(project, { query: { $expr: expr }, expand_columns: ['inputs.model'] })).toEqual([]);
  });

  it('sorts by a value of the referenced object', async () => {
    const sort = [{ field: 'inputs.model.max_tokens', direction: 'desc' }];
    expect(await ids(project, { sort_by: sort, expand_columns: ['inputs.model'] })).toEqual(['b', 'a', 'c', 'd']);
  });

  it('keeps refs as strings with return_expanded_column_values: false, still filtering through them', async () => {
    const body = { project_id: project, query: above(500), expand_columns: ['inputs.model'] };
    const expanded = (await post(app, user, '/calls/query', body)).json().calls;
    expect(expanded[0].inputs.model).toMatchObject({ max_tokens: 2000, _ref: expect.stringMatching(/^weave:\/\/\//) });
    const kept = (await post(app, user, '/calls/query', { ...body, return_expanded_column_values: false })).json().calls;
    expect(kept.map((c: { id: string }) => c.id)).toEqual(['b']);
    expect(kept[0].inputs.model).toBe(expanded[0].inputs.model._ref);
  });
});

describe('$not and missing values', () => {
  it('does not match calls where the negated comparison is NULL (a nullable column), as weave\'s stores answer', async () => {
    const project = newProject();
    await ingest(project, [{ id: 'named', display_name: 'x' }, { id: 'other', display_name: 'y' }, { id: 'unnamed' }]);
    const not = (expr: unknown) => ({ $expr: { $not: [expr] } });
    expect(await ids(project, { query: not({ $eq: [f('display_name'), l('x')] }) })).toEqual(['other']);
    // $eq with null asks for the missing ones explicitly.
    expect(await ids(project, { query: { $expr: { $or: [not({ $eq: [f('display_name'), l('x')] }).$expr, { $eq: [f('display_name'), l(null)] }] } } })).toEqual(['other', 'unnamed']);
  });

  it('matches missing JSON paths, which read as the empty string as in ClickHouse', async () => {
    const project = newProject();
    await ingest(project, [{ id: 'x', inputs: { tag: 'x' } }, { id: 'y', inputs: { tag: 'y' } }, { id: 'none', inputs: {} }]);
    expect(await ids(project, { query: { $expr: { $not: [{ $eq: [f('inputs.tag'), l('x')] }] } } })).toEqual(['y', 'none']);
  });
});

describe('numbers read from JSON values and text', () => {
  // Each call's inputs.v is spliced into the request as this raw JSON text. Calls store JSON numbers as
  // doubles spelled out by PostgreSQL: 1e200 is 201 digits, 1e-201 has 201 after the point.
  const values: Record<string, string> = {
    int: '7',
    float: '7.0',
    neg: '-7',
    negZero: '-0',
    negZeroFloat: '-0.0',
    exp: '7e0',
    bigExp: '1e199',
    hugeExp: '1e200',
    maxDouble: '1.7e308',
    tinyExp: '1e-200',
    tinierExp: '1e-201',
    fraction: `0.${'1'.repeat(201)}`,
    strInt: '"7"',
    strSpaces: '"  7  "',
    strPlus: '"+7"',
    strPoint: '"7."',
    strLeadingPoint: '".5"',
    strExp: '"0.7e1"',
    strExp3: '"7e-999"',
    strExp4: '"7e1000"',
    strDigits200: `"${'9'.repeat(200)}"`,
    strDigits201: `"${'9'.repeat(201)}"`,
    strDigits400: `"${'9'.repeat(400)}"`,
    strDigits401: `"${'9'.repeat(401)}"`,
    strFraction200: `"0.${'1'.repeat(200)}"`,
    strFraction201: `"0.${'1'.repeat(201)}"`,
    strPadded: `"${' '.repeat(300)}7"`,
    strLeadingZeros: `"${'0'.repeat(201)}7"`,
    strLongWord: `"${'x'.repeat(300)}"`,
    strNaN: '"NaN"',
    strInfinity: '"Infinity"',
    strHex: '"0x7"',
    strUnderscore: '"1_000"',
    strEmpty: '""',
    strWord: '"seven"',
    boolTrue: 'true',
    boolFalse: 'false',
    object: '{"v": 7}',
    array: '[7]',
    jsonNull: 'null',
  };
  const names = Object.keys(values);
  let project: string;

  beforeAll(async () => {
    project = newProject();
    const specs: CallSpec[] = [...names.map((id) => ({ id, inputs: { v: `@${id}@` } })), { id: 'missing', inputs: {} }];
    let body = JSON.stringify({ batch: specs.flatMap((s) => callItems(project, s)) });
    for (const id of names) body = body.replace(`"@${id}@"`, values[id]);
    const response = await post(app, user, '/call/upsert_batch', body);
    expect(response.statusCode, response.body).toBe(200);
  });

  const where = (expr: unknown) => ({ query: { $expr: expr } });
  const v = f('inputs.v');
  const isNumber = where({ $or: [{ $gte: [v, l(0)] }, { $lt: [v, l(0)] }] });
  const atLeastSeven = ['int', 'float', 'exp', 'bigExp', 'hugeExp', 'maxDouble', 'strInt', 'strSpaces', 'strPlus', 'strPoint', 'strExp', 'strDigits200', 'strDigits201', 'strDigits400', 'strPadded', 'strLeadingZeros'];

  it('reads JSON numbers, and strings that spell one, as numbers; anything else is no number', async () => {
    const numbers = ['int', 'float', 'neg', 'negZero', 'negZeroFloat', 'exp', 'bigExp', 'hugeExp', 'maxDouble', 'tinyExp', 'fraction'];
    const strings = ['strInt', 'strSpaces', 'strPlus', 'strPoint', 'strLeadingPoint', 'strExp', 'strExp3', 'strDigits200', 'strDigits201', 'strDigits400', 'strFraction200', 'strPadded', 'strLeadingZeros'];
    expect(await ids(project, isNumber)).toEqual([...numbers, ...strings]);
    expect(await count(project, isNumber)).toBe(numbers.length + strings.length);
  });

  it('compares by value whatever the spelling, negative zero included', async () => {
    const sevens = ['int', 'float', 'exp', 'strInt', 'strSpaces', 'strPlus', 'strPoint', 'strExp', 'strPadded', 'strLeadingZeros'];
    expect(await ids(project, where({ $eq: [v, l(7)] }))).toEqual(sevens);
    expect(await ids(project, where({ $eq: [v, l(0)] }))).toEqual(['negZero', 'negZeroFloat']);
  });

  it('reads digit runs over 200 (400 without a point) as no number, so no huge value fails a cast', async () => {
    expect(await ids(project, where({ $gt: [v, l(1e198)] }))).toEqual(['bigExp', 'hugeExp', 'maxDouble', 'strDigits200', 'strDigits201', 'strDigits400']);
    expect(await ids(project, where({ $lt: [v, l(1e-199)] }))).toEqual(['neg', 'negZero', 'negZeroFloat', 'tinyExp', 'strExp3']);
  });

  it('matches a value that is no number under neither a comparison nor its $not', async () => {
    expect(await ids(project, where({ $not: [{ $lt: [v, l(7)] }] }))).toEqual(atLeastSeven);
  });

  it('converts with $convert as comparisons do, from JSON and from text', async () => {
    const toDouble = (input: unknown) => ({ $convert: { input, to: 'double' } });
    expect(await ids(project, where({ $gte: [toDouble(v), l(7)] }))).toEqual(atLeastSeven);
    expect(await ids(project, where({ $gte: [toDouble({ $convert: { input: v, to: 'string' } }), l(7)] }))).toEqual(atLeastSeven);
  });

  it('sorts numbers by value, then the rest by text, missing last', async () => {
    expect(await ids(project, { sort_by: [{ field: 'inputs.v', direction: 'asc' }] })).toEqual([
      'neg', 'negZero', 'negZeroFloat', 'strExp3', 'tinyExp', 'fraction', 'strFraction200', 'strLeadingPoint', 'strPadded', 'strSpaces',
      // 7 before 7.0 (the float and 7e0, which is stored as the float 7.0): equal values sort by their text.
      'strPlus', 'strExp', 'strLeadingZeros', 'int', 'strInt', 'strPoint', 'exp', 'float', 'bigExp', 'strDigits200', 'hugeExp',
      'strDigits201', 'maxDouble', 'strDigits400',
      'strEmpty', 'tinierExp', 'strFraction201', 'strHex', 'strUnderscore', 'strExp4', 'strDigits401', 'strInfinity', 'strNaN', 'array',
      'boolFalse', 'strWord', 'boolTrue', 'strLongWord', 'object', 'jsonNull', 'missing',
    ]);
  });
});
