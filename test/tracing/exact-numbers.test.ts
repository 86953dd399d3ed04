import { sql } from 'kysely';
import { parse } from 'lossless-json';
import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { basicAuth, callItems, post } from './helpers.js';

/**
 * Numbers in call payloads that JSON.parse would change, as Python clients send them: integers beyond
 * 2^53 (a 63-bit seed, a snowflake id), stored and answered digit for digit and matched exactly by query
 * literals (JSON.parse reads 9007199254740993 as 9007199254740992), and whole-valued floats, which read
 * back with their point (JSON.parse and JSON.stringify turn `1.0` into `1`, an int to Python).
 */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('exact')}`;

/** JSON text in which each `"<name>"` string placeholder is replaced by a raw number literal. */
function withLiterals(body: unknown, literals: Record<string, string>): string {
  let text = JSON.stringify(body);
  for (const [name, literal] of Object.entries(literals)) text = text.replaceAll(`"${name}"`, literal);
  return text;
}

/** Parses an answer keeping every number's text, so that a changed digit shows. */
const exact = (text: string) => JSON.parse(JSON.stringify(parse(text, null, (n) => `#${n}`)));

const LITERALS = {
  SEED: '9223372036854775807',
  NEG: '-9007199254740993',
  SNOWFLAKE: '1789012345678901234567',
  FLOAT: '0.30000000000000004',
  SAFE: '9007199254740991',
};

async function ingest(project: string, id: string): Promise<void> {
  const items = callItems(project, {
    id,
    attributes: { run: 'SNOWFLAKE' },
    inputs: { seed: 'SEED', nested: [{ n: 'NEG' }, 'SAFE'], text: '9223372036854775807', x: 'FLOAT' },
    output: ['SEED', 'NEG'],
    summary: { tokens: 'SNOWFLAKE' },
  });
  // A plain call in the same batch: its row is written without the exact_numbers flag.
  const plain = callItems(project, { id: `${id}-plain`, inputs: { n: 1 }, output: 2 });
  const response = await post(app, user, '/call/upsert_batch', withLiterals({ batch: [...plain, ...items] }, LITERALS));
  expect(response.statusCode, response.body).toBe(200);
}

const EXPECTED = {
  attributes: { run: '#1789012345678901234567' },
  inputs: { seed: '#9223372036854775807', nested: [{ n: '#-9007199254740993' }, '#9007199254740991'], text: '9223372036854775807', x: '#0.30000000000000004' },
  output: ['#9223372036854775807', '#-9007199254740993'],
};

describe('integers beyond 2^53 in calls', () => {
  it('are stored and read back digit for digit by /call/read, /calls/query and /calls/stream_query', async () => {
    const project = newProject();
    await ingest(project, 'c1');
    const plain = (await post(app, user, '/call/read', { project_id: project, id: 'c1-plain' })).json().call;
    expect([plain.inputs, plain.output]).toEqual([{ n: 1 }, 2]);
    const read = exact((await post(app, user, '/call/read', { project_id: project, id: 'c1' })).body).call;
    expect(read).toMatchObject(EXPECTED);
    expect(read.summary.tokens).toBe('#1789012345678901234567');
    const only = { project_id: project, filter: { call_ids: ['c1'] } };
    const [queried] = exact((await post(app, user, '/calls/query', only)).body).calls;
    expect(queried).toMatchObject(EXPECTED);
    const streamed = (await post(app, user, '/calls/stream_query', only)).body;
    expect(exact(streamed.trim())).toMatchObject(EXPECTED);
  });

  it('keep their digits through /call/start, /call/end and the v2 routes', async () => {
    const project = newProject();
    const [start, end] = callItems(project, { id: 'c2', inputs: { seed: 'SEED' }, output: { seed: 'NEG' } }) as { req: Record<string, unknown> }[];
    expect((await post(app, user, '/call/start', withLiterals(start.req, LITERALS))).statusCode).toBe(200);
    expect((await post(app, user, '/call/end', withLiterals(end.req, LITERALS))).statusCode).toBe(200);
    const [v2start, v2end] = callItems(project, { id: 'c3', inputs: { seed: 'SNOWFLAKE' }, output: null }) as { req: Record<string, unknown> }[];
    expect((await app.inject({ method: 'POST', url: `/traces/v2/${project}/call/start`, headers: headers(), payload: withLiterals(v2start.req, LITERALS) })).statusCode).toBe(200);
    expect((await app.inject({ method: 'POST', url: `/traces/v2/${project}/call/end`, headers: headers(), payload: withLiterals(v2end.req, LITERALS) })).statusCode).toBe(200);
    const complete = { ...(callItems(project, { id: 'c4', inputs: { seed: 'SEED' } })[0] as { req: { start: object } }).req.start, ended_at: '2026-01-01T00:00:00Z', output: 'NEG', summary: {} };
    const response = await app.inject({ method: 'POST', url: `/traces/v2/${project}/calls/complete`, headers: headers(), payload: withLiterals({ batch: [complete] }, LITERALS) });
    expect(response.statusCode, response.body).toBe(200);
    const calls = (await post(app, user, '/calls/stream_query', { project_id: project, sort_by: [{ field: 'id', direction: 'asc' }] })).body;
    expect(calls.trim().split('\n').map(exact).map((c: Record<string, unknown>) => [c.id, c.inputs, c.output])).toEqual([
      ['c2', { seed: '#9223372036854775807' }, { seed: '#-9007199254740993' }],
      ['c3', { seed: '#1789012345678901234567' }, null],
      ['c4', { seed: '#9223372036854775807' }, '#-9007199254740993'],
    ]);
  });

  it('keep their digits whichever half of the call holds them and whichever arrives first', async () => {
    const project = newProject();
    const [start, end] = callItems(project, { id: 'late-start', inputs: { plain: 1 }, output: { seed: 'SEED' } });
    for (const item of [end, start]) expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: [item] }, LITERALS))).statusCode).toBe(200);
    // The start is sent again, without long integers: the output keeps its digits.
    expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: [start] }, LITERALS))).statusCode).toBe(200);
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'late-start' })).body);
    expect([call.inputs, call.output]).toEqual([{ plain: '#1' }, { seed: '#9223372036854775807' }]);
  });

  it('are matched exactly by query literals, where the nearest double would match another call', async () => {
    const project = newProject();
    // 2^63 - 1 and 2^63 - 2 are the same double.
    for (const [id, seed] of [['max', '9223372036854775807'], ['below', '9223372036854775806'], ['small', '5']]) {
      const items = callItems(project, { id, inputs: { seed: 'SEED' } });
      expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: items }, { SEED: seed }))).statusCode).toBe(200);
    }
    const ids = async (expr: unknown) => {
      const body = withLiterals({ project_id: project, query: { $expr: expr }, sort_by: [{ field: 'id', direction: 'asc' }] }, { SEED: '9223372036854775807' });
      const response = await post(app, user, '/calls/stream_query', body);
      expect(response.statusCode, response.body).toBe(200);
      return response.body.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line).id);
    };
    const seed = { $getField: 'inputs.seed' };
    expect(await ids({ $eq: [seed, { $literal: 'SEED' }] })).toEqual(['max']);
    expect(await ids({ $lt: [seed, { $literal: 'SEED' }] })).toEqual(['below', 'small']);
    expect(await ids({ $in: [seed, [{ $literal: 'SEED' }, { $literal: 5 }]] })).toEqual(['max', 'small']);
    expect(await ids({ $eq: [{ $convert: { input: seed, to: 'string' } }, { $literal: 'SEED' }] })).toEqual(['max']);
    const stats = await post(app, user, '/calls/query_stats', withLiterals({ project_id: project, query: { $expr: { $eq: [seed, { $literal: 'SEED' }] } } }, { SEED: '9223372036854775807' }));
    expect(stats.json()).toEqual({ count: 1 });
    const refused = await post(app, user, '/calls/query', withLiterals({ project_id: project, query: { $expr: { $eq: [{ $getField: 'started_at' }, { $literal: 'SEED' }] } } }, { SEED: '9223372036854775807' }));
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toEqual({ reason: 'Literal 9223372036854775807 cannot be compared as timestamptz' });
    const contains = { $contains: { input: seed, substr: { $literal: ['SEED'] } } };
    const list = await post(app, user, '/calls/query', withLiterals({ project_id: project, query: { $expr: contains } }, { SEED: '9223372036854775807' }));
    expect([list.statusCode, list.json()]).toEqual([400, { reason: 'Literal [9223372036854775807] cannot be compared as text' }]);
  });

  it('keep their digits beside a NUL character that the payload is cleaned of', async () => {
    const project = newProject();
    const items = callItems(project, { id: 'nul', inputs: { seed: 'SEED', text: 'a\u0000b' } });
    expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: items }, LITERALS))).statusCode).toBe(200);
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'nul' })).body);
    expect(call.inputs).toEqual({ seed: '#9223372036854775807', text: 'a\ufffdb' });
  });

  it('leave an empty body to the schema, which reports it missing', async () => {
    const response = await post(app, user, '/call/upsert_batch', ' ');
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({ detail: [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }] });
  });

  it('outside the payloads are checked as the nearest double, as before', async () => {
    const project = newProject();
    const items = callItems(project, { id: 'step', inputs: {} }) as { req: { start: Record<string, unknown> } }[];
    items[0].req.start.wb_run_step = 'STEP';
    const response = await post(app, user, '/call/upsert_batch', withLiterals({ batch: items }, { STEP: '9007199254740993' }));
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [
        {
          type: 'less_than_equal',
          loc: ['body', 'batch', 0, 'req', 'start', 'wb_run_step'],
          msg: 'Input should be less than or equal to 9007199254740991',
          input: 9007199254740992,
          ctx: { le: 9007199254740991 },
        },
      ],
    });
    expect((await post(app, user, '/calls/query_stats', { project_id: project })).json()).toEqual({ count: 0 });
  });
});

describe('whole-valued floats in calls', () => {
  const FLOATS = { ONE: '1.0', ZERO: '0.00', BIG: '1e+16', HUGE: '1e+21', NEG: '-2.0', HALF: '0.5' };

  it('read back as floats, not ints, through /call/read, /calls/query and /calls/stream_query', async () => {
    const project = newProject();
    const items = callItems(project, {
      id: 'f1',
      attributes: { temperature: 'ONE' },
      inputs: { scores: ['ONE', 'ZERO', 'HALF', 1], big: 'BIG', huge: 'HUGE', label: 'model v1.0' },
      output: 'NEG',
      summary: { reward: 'ONE' },
    });
    const plain = callItems(project, { id: 'f1-plain', inputs: { n: 1, x: 0.5 }, output: 2 });
    expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: [...plain, ...items] }, FLOATS))).statusCode).toBe(200);
    const expected = {
      attributes: { temperature: '#1.0' },
      inputs: { scores: ['#1.0', '#0.0', '#0.5', '#1'], big: '#10000000000000000.0', huge: '#1000000000000000000000.0', label: 'model v1.0' },
      output: '#-2.0',
    };
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'f1' })).body);
    expect(call).toMatchObject(expected);
    expect(call.summary.reward).toBe('#1.0');
    const only = { project_id: project, filter: { call_ids: ['f1'] } };
    expect(exact((await post(app, user, '/calls/query', only)).body).calls[0]).toMatchObject(expected);
    expect(exact((await post(app, user, '/calls/stream_query', only)).body.trim())).toMatchObject(expected);
    const withExtras = { ...only, include_costs: true, include_feedback: true, columns: ['inputs', 'output', 'summary'] };
    expect(exact((await post(app, user, '/calls/stream_query', withExtras)).body.trim())).toMatchObject({ inputs: expected.inputs, output: '#-2.0', summary: { reward: '#1.0' } });
    const other = exact((await post(app, user, '/call/read', { project_id: project, id: 'f1-plain' })).body).call;
    expect([other.inputs, other.output]).toEqual([{ n: '#1', x: '#0.5' }, '#2']);
  });

  it('compare with integers and with float literals by value', async () => {
    const project = newProject();
    for (const [id, x] of [['float', '1.0'], ['int', '1'], ['two', '2.0']]) {
      const items = callItems(project, { id, inputs: { x: 'X' } });
      expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: items }, { X: x }))).statusCode).toBe(200);
    }
    const ids = async (literal: string) => {
      const body = withLiterals({ project_id: project, query: { $expr: { $eq: [{ $getField: 'inputs.x' }, { $literal: 'L' }] } }, sort_by: [{ field: 'id', direction: 'asc' }] }, { L: literal });
      const response = await post(app, user, '/calls/query', body);
      expect(response.statusCode, response.body).toBe(200);
      return response.json().calls.map((c: { id: string }) => c.id);
    };
    expect(await ids('1')).toEqual(['float', 'int']);
    expect(await ids('1.0')).toEqual(['float', 'int']);
    expect(await ids('2')).toEqual(['two']);
  });

  it('count as their values where the server computes with the summary: costs and a descendant error', async () => {
    const project = newProject();
    // A float where the server expects an object (a model's usage, summary.weave) is no object.
    const summary = { usage: { 'gpt-4': { prompt_tokens: 'TOKENS', completion_tokens: 10, requests: 'ONE' }, 'gpt-4o': 'ONE' }, status_counts: { success: 'ZERO', error: 'ONE' }, weave: 'ONE' };
    const items = callItems(project, { id: 'priced', summary });
    expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: items }, { ...FLOATS, TOKENS: '2000000.0' }))).statusCode).toBe(200);
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'priced', include_costs: true })).body);
    expect(call.summary.usage).toEqual({ 'gpt-4': { prompt_tokens: '#2000000.0', completion_tokens: '#10', requests: '#1.0' }, 'gpt-4o': '#1.0' });
    expect(Object.keys(call.summary.weave).sort()).toEqual(['costs', 'latency_ms', 'status', 'trace_name']);
    expect(Object.keys(call.summary.weave.costs)).toEqual(['gpt-4']);
    expect(call.summary.weave.status).toBe('descendant_error');
    // gpt-4: 3e-05 a prompt token, 6e-05 a completion token (the default price table).
    expect(call.summary.weave.costs['gpt-4']).toMatchObject({ prompt_tokens: '#2000000', completion_tokens: '#10', requests: '#1', prompt_tokens_total_cost: '#60' });
  });

  it('refuse a body whose whole floats, written out, would take more than 16 times its size, and store nothing', async () => {
    const project = newProject();
    // 1e308 is 309 digits written out: 3,000 of them in 18 KB of body.
    const body = JSON.stringify({ batch: callItems(project, { id: 'huge', inputs: { x: 'HUGE' } }) }).replace('"HUGE"', `[${Array(3000).fill('1e308').join(',')}]`);
    const response = await post(app, user, '/call/upsert_batch', body);
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({ reason: expect.stringMatching(/^The body's numbers, written out exactly, take more than \d+ characters; send fewer or smaller whole floats\.$/) });
    expect((await post(app, user, '/calls/query_stats', { project_id: project })).json()).toEqual({ count: 0 });
    const fine = JSON.stringify({ batch: callItems(project, { id: 'fine', inputs: { x: 'MASK' } }) }).replace('"MASK"', `[${Array(3000).fill('1.0').join(',')}]`);
    expect((await post(app, user, '/call/upsert_batch', fine)).statusCode).toBe(200);
  });

  it('outside the payloads are the numbers they were before; a call\'s OpenTelemetry span is a payload', async () => {
    const project = newProject();
    const items = callItems(project, { id: 'step', inputs: { x: 'ONE' } }) as { req: { start: Record<string, unknown> } }[];
    items[0].req.start.wb_run_step = 'STEP';
    const spanOnly = callItems(project, { id: 'span-only', inputs: { x: 1 } }) as { req: { start: Record<string, unknown> } }[];
    spanOnly[0].req.start.otel_dump = { name: 'span', attributes: { temperature: 'ONE' } };
    expect((await post(app, user, '/call/upsert_batch', withLiterals({ batch: [...items, ...spanOnly] }, { ...FLOATS, STEP: '5.0' }))).statusCode).toBe(200);
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'step' })).body);
    expect([call.wb_run_step, call.inputs]).toEqual(['#5', { x: '#1.0' }]);
    const { call: span } = exact((await post(app, user, '/call/read', { project_id: project, id: 'span-only' })).body);
    expect([span.inputs, span.attributes.otel_span]).toEqual([{ x: '#1' }, { name: 'span', attributes: { temperature: '#1.0' } }]);
    const limited = await post(app, user, '/calls/query', withLiterals({ project_id: project, limit: 'ONE' }, FLOATS));
    expect(limited.json().calls.map((c: { id: string }) => c.id)).toEqual(['step']);
  });
});

describe('numbers a double would change in OpenTelemetry spans', () => {
  const value = (v: Record<string, unknown>) => v;
  const attribute = (key: string, v: Record<string, unknown>) => ({ key, value: value(v) });
  const export_ = (attributes: unknown[]) => ({
    resourceSpans: [
      {
        resource: { attributes: [attribute('service.name', { stringValue: 'agent' }), attribute('deployment.weight', { doubleValue: 2 })] },
        scopeSpans: [{ scope: { name: 's' }, spans: [{ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', name: 'chat', startTimeUnixNano: '1735689600000000000', endTimeUnixNano: '1735689601000000000', attributes }] }],
      },
    ],
  });

  it('keep a whole double a float, an int64 every digit, and both in JSON text attributes, in the call and in its otel_span', async () => {
    const project = newProject();
    const body = export_([
      attribute('gen_ai.request.model', { stringValue: 'm' }),
      attribute('gen_ai.request.temperature', { doubleValue: 1 }),
      attribute('gen_ai.request.top_p', { doubleValue: 0.5 }),
      attribute('gen_ai.request.seed', { intValue: '9223372036854775807' }),
      attribute('gen_ai.request.max_tokens', { intValue: '64' }),
      attribute('gen_ai.usage.input_tokens', { doubleValue: 12 }),
      attribute('gen_ai.prompt', { stringValue: '{"scores": [2.0, 0.25, 3], "id": 12345678901234567890}' }),
      attribute('wandb.wb_run_step', { doubleValue: 3 }),
    ]);
    const response = await app.inject({
      method: 'POST',
      url: '/traces/otel/v1/traces',
      headers: { authorization: basicAuth(user.key), 'content-type': 'application/json', project_id: project },
      payload: JSON.stringify(body),
    });
    expect(response.statusCode, response.body).toBe(200);
    const parameters = { model: 'm', temperature: '#1.0', top_p: '#0.5', seed: '#9223372036854775807', max_tokens: '#64' };
    const expected = {
      wb_run_step: '#3',
      attributes: { model: 'm', model_parameters: parameters },
      inputs: { 'gen_ai.prompt': { scores: ['#2.0', '#0.25', '#3'], id: '#12345678901234567890' } },
      summary: { usage: { m: { input_tokens: '#12' } } },
    };
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'b7ad6b7169203331' })).body);
    expect(call).toMatchObject(expected);
    expect(call.attributes.otel_span.attributes).toMatchObject({ 'gen_ai.request.temperature': '#1.0', 'gen_ai.request.seed': '#9223372036854775807', 'gen_ai.usage.input_tokens': '#12.0' });
    // Resource attributes, copied into every span, are plain numbers.
    expect(call.attributes.otel_span.resource.attributes).toEqual({ 'service.name': 'agent', 'deployment.weight': '#2' });
    const streamed = (await post(app, user, '/calls/stream_query', { project_id: project })).body;
    expect(exact(streamed.trim())).toMatchObject(expected);
    // Filters compare the stored numbers as numbers.
    const count = async (field: string, literal: string) => {
      const body = withLiterals({ project_id: project, query: { $expr: { $eq: [{ $getField: field }, { $literal: 'VALUE' }] } } }, { VALUE: literal });
      return (await post(app, user, '/calls/query_stats', body)).json().count;
    };
    expect(await count('attributes.model_parameters.temperature', '1')).toBe(1);
    expect(await count('attributes.model_parameters.seed', '9223372036854775807')).toBe(1);
    expect(await count('attributes.model_parameters.seed', '9223372036854775806')).toBe(0);
  });
});

describe('numbers a double would change in OpenTelemetry spans, written out', () => {
  it('are kept up to twice the export\'s size; past it, whole doubles are the plain numbers they were', async () => {
    const project = newProject();
    // 1e308 is 311 characters written out as a float, for 22 in the body: 2,000 of them would be 28 times it.
    const values = Array.from({ length: 2000 }, () => ({ doubleValue: 1e308 }));
    const body = {
      resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans: [{ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203332', name: 'huge', startTimeUnixNano: '1735689600000000000', endTimeUnixNano: '1735689601000000000', attributes: [{ key: 'input', value: { kvlistValue: { values: [{ key: 'x', value: { arrayValue: { values } } }] } } }] }] }] }],
    };
    const response = await app.inject({ method: 'POST', url: '/traces/otel/v1/traces', headers: { authorization: basicAuth(user.key), 'content-type': 'application/json', project_id: project }, payload: JSON.stringify(body) });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({});
    const { call } = exact((await post(app, user, '/call/read', { project_id: project, id: 'b7ad6b7169203332' })).body);
    const digits = `#1${'0'.repeat(308)}`;
    const x = call.inputs.x as string[];
    expect(x).toHaveLength(2000);
    expect([x[0], x[1999]]).toEqual([`${digits}.0`, digits]);
    const kept = x.filter((value) => value.endsWith('.0')).length;
    expect(kept).toBeGreaterThan(100);
    expect(kept).toBeLessThan(2000);
  });
});

describe('numbers a double would change in feedback payloads', () => {
  const LITS = { SEED: '9223372036854775807', ONE: '1.0' };

  it('are stored and answered as sent by /feedback/create, /feedback/query and include_feedback, and matched exactly', async () => {
    const project = newProject();
    expect((await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', inputs: {} }) })).statusCode).toBe(200);
    const create = (id: string, seed: string) =>
      post(app, user, '/feedback/create', withLiterals({ project_id: project, id, weave_ref: `weave:///${project}/call/c`, feedback_type: 'score', payload: { score: 'ONE', seed: 'SEED', n: 2 } }, { ...LITS, SEED: seed }));
    const created = await create('f1', LITS.SEED);
    expect(created.statusCode, created.body).toBe(200);
    expect(exact(created.body).payload).toEqual({ score: '#1.0', seed: '#9223372036854775807', n: '#2' });
    // 2^63 - 2 is the same double as 2^63 - 1.
    expect((await create('f2', '9223372036854775806')).statusCode).toBe(200);

    const query = (body: Record<string, unknown>) => post(app, user, '/feedback/query', withLiterals({ project_id: project, sort_by: [{ field: 'id', direction: 'asc' }], ...body }, LITS));
    const all = exact((await query({ fields: ['id', 'payload', 'payload.score'] })).body).result;
    expect(all).toEqual([
      { id: 'f1', payload: { score: '#1.0', seed: '#9223372036854775807', n: '#2' }, 'payload.score': '#1.0' },
      { id: 'f2', payload: { score: '#1.0', seed: '#9223372036854775806', n: '#2' }, 'payload.score': '#1.0' },
    ]);
    const matched = await query({ fields: ['id'], query: { $expr: { $eq: [{ $getField: 'payload.seed' }, { $literal: 'SEED' }] } } });
    expect(matched.json().result).toEqual([{ id: 'f1' }]);

    const only = { project_id: project, filter: { call_ids: ['c'] }, include_feedback: true };
    const streamed = exact((await post(app, user, '/calls/stream_query', only)).body.trim());
    expect(streamed.summary.weave.feedback.map((f: { payload: unknown }) => f.payload)).toEqual([
      { score: '#1.0', seed: '#9223372036854775807', n: '#2' },
      { score: '#1.0', seed: '#9223372036854775806', n: '#2' },
    ]);
    const [queried] = exact((await post(app, user, '/calls/query', only)).body).calls;
    expect(queried.summary.weave.feedback[0].payload.score).toBe('#1.0');
  });

  it('read as before from a row written without them, where JSONB spelled a float out as digits', async () => {
    const project = newProject();
    expect((await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', inputs: {} }) })).statusCode).toBe(200);
    // As an older release stored {"x": 1e21}: JSON.stringify wrote 1e+21, which JSONB keeps as 22 digits.
    await sql`insert into trace_feedback (project_id, id, weave_ref, wb_user_id, feedback_type, payload)
      values (${project}, 'old', ${`weave:///${project}/call/c`}, ${'u'}, 'score', '{"x": 1e+21}'::jsonb)`.execute(app.db);
    const { result } = exact((await post(app, user, '/feedback/query', { project_id: project, fields: ['payload', 'payload.x'] })).body);
    expect(result).toEqual([{ payload: { x: '#1e+21' }, 'payload.x': '#1e+21' }]);
    const call = exact((await post(app, user, '/calls/stream_query', { project_id: project, include_feedback: true })).body.trim());
    expect(call.summary.weave.feedback[0].payload).toEqual({ x: '#1e+21' });
    expect(Object.keys(call.summary.weave.feedback[0])).not.toContain('exact_numbers');
  });
});

function headers() {
  return { authorization: `Basic ${Buffer.from(`api:${user.key}`).toString('base64')}`, 'content-type': 'application/json' };
}

describe('objects and tables read back as sent', () => {
  it('keeps floats and big integers through obj/create → obj/read → obj/create (same digest), table/query and refs', async () => {
    const project = newProject();
    const text = `{"obj": {"project_id": "${project}", "object_id": "o", "val": {"x": 1.0, "y": 12345678901234567890, "z": 1e5, "w": [2.50, -0.0001]}}}`;
    const created = (await post(app, user, '/obj/create', text)).json();
    const read = await post(app, user, '/obj/read', { project_id: project, object_id: 'o', digest: created.digest });
    expect(read.statusCode).toBe(200);
    expect(read.body).toContain('"val":{"w":[2.50,-0.0001],"x":1.0,"y":12345678901234567890,"z":100000.0}');
    const val = read.body.slice(read.body.indexOf('"val":') + 6, read.body.indexOf(',"wb_user_id"'));
    const again = (await post(app, user, '/obj/create', `{"obj": {"project_id": "${project}", "object_id": "o", "val": ${val}}}`)).json();
    expect(again).toEqual(created);
    const queried = await post(app, user, '/objs/query', { project_id: project });
    expect(queried.body).toContain('"val":{"w":[2.50,-0.0001],"x":1.0,"y":12345678901234567890,"z":100000.0}');
    const refs = await post(app, user, '/refs/read_batch', { refs: [`weave:///${project}/object/o:${created.digest}`] });
    expect(refs.body).toBe('{"vals":[{"w":[2.50,-0.0001],"x":1.0,"y":12345678901234567890,"z":100000.0}]}');

    const table = (await post(app, user, '/table/create', `{"table": {"project_id": "${project}", "rows": [{"a": 1.0, "b": 98765432109876543210}]}}`)).json();
    const rows = await post(app, user, '/table/query', { project_id: project, digest: table.digest });
    expect(rows.body).toBe(`{"rows":[{"digest":"${table.row_digests[0]}","val":{"a":1.0,"b":98765432109876543210},"original_index":0}]}`);
    const stream = await post(app, user, '/table/query_stream', { project_id: project, digest: table.digest });
    expect(stream.body).toBe(`{"digest":"${table.row_digests[0]}","val":{"a":1.0,"b":98765432109876543210},"original_index":0}\n`);
    const again2 = (await post(app, user, '/table/create', `{"table": {"project_id": "${project}", "rows": [${rows.body.slice(rows.body.indexOf('"val":') + 6, rows.body.indexOf(',"original_index"'))}]}}`)).json();
    expect(again2).toEqual(table);
  });
});
