import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { callItems, post } from './helpers.js';

/** Values PostgreSQL or JavaScript cannot take as they come: each is refused with a 4xx, or stored made safe. */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const NUL_REASON = 'A string in the payload contains a NUL character (\\u0000), which PostgreSQL JSONB cannot store. Remove or replace it and resend.';
const SURROGATE_REASON =
  'A value in the request is not valid text for PostgreSQL (for example a string with an unpaired UTF-16 surrogate such as \\ud800). Fix it and resend.';

const newProject = () => `${user.entity}/${uniqueName('odd')}`;
const status = async (response: Awaited<ReturnType<typeof post>>) => [response.statusCode, response.json()];

describe('NUL characters and lone surrogates', () => {
  it('stores call payloads with U+0000 and lone surrogates replaced by U+FFFD (upsert_batch, call/update, otel)', async () => {
    const project = newProject();
    const batch = callItems(project, { id: 'bad\u0000id', op_name: 'op\u0000name', display_name: 'dn\u0000', inputs: { 'k\u0000': 'a\u0000b', s: '\ud800x', pair: '😀' }, output: '\udc00' });
    const written = await post(app, user, '/call/upsert_batch', JSON.stringify({ batch }));
    expect(await status(written)).toEqual([200, { res: [{ id: 'bad\ufffdid', trace_id: 'bad\ufffdid' }, {}] }]);
    const call = (await post(app, user, '/call/read', { project_id: project, id: 'bad\ufffdid' })).json().call;
    expect([call.op_name, call.display_name, call.inputs, call.output]).toEqual(['op\ufffdname', 'dn\ufffd', { 'k\ufffd': 'a\ufffdb', s: '\ufffdx', pair: '😀' }, '\ufffd']);
    expect(await status(await post(app, user, '/call/update', { project_id: project, call_id: 'bad\ufffdid', display_name: 'x\u0000\udbff' }))).toEqual([200, {}]);
    expect((await post(app, user, '/call/read', { project_id: project, id: 'bad\ufffdid' })).json().call.display_name).toBe('x\ufffd\ufffd');
  });

  it('refuses NUL and lone surrogates with 400 where a digest covers the value, and in feedback and cost keys', async () => {
    const project = newProject();
    expect(await status(await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'o', val: { a: 'x\u0000' } } }))).toEqual([400, { reason: NUL_REASON }]);
    expect(await status(await post(app, user, '/obj/create', `{"obj": {"project_id": "${project}", "object_id": "o", "val": {"a": "\\ud800"}}}`))).toEqual([400, { reason: SURROGATE_REASON }]);
    expect(await status(await post(app, user, '/table/create', `{"table": {"project_id": "${project}", "rows": [{"a": "\\udc00"}]}}`))).toEqual([400, { reason: SURROGATE_REASON }]);
    const feedback = { project_id: project, weave_ref: `weave:///${project}/call/c`, feedback_type: 'custom', payload: {}, creator: 'me\u0000' };
    expect(await status(await post(app, user, '/feedback/create', feedback))).toEqual([400, { reason: NUL_REASON }]);
    const cost = { project_id: project, costs: { 'model\u0000': { prompt_token_cost: 1, completion_token_cost: 1 } } };
    expect(await status(await post(app, user, '/cost/create', cost))).toEqual([400, { reason: NUL_REASON }]);
  });
});

describe('datetimes that do not exist', () => {
  it('refuses datetimes that do not exist with 422 in bodies and 400 as query literals', async () => {
    const project = newProject();
    const start = (started_at: string) => ({ start: { project_id: project, id: 'd', op_name: 'op', started_at, attributes: {}, inputs: {} } });
    for (const bad of ['2025-02-30T00:00:00Z', '2025-01-01T99:00:00Z', '0000-01-01T00:00:00Z', '2025-13-01T00:00:00Z']) {
      const response = await post(app, user, '/call/start', start(bad));
      expect(response.statusCode, bad).toBe(422);
      expect(response.json().detail[0].msg, bad).toBe('Value error, must be an ISO-8601 datetime that exists, in years 1 to 9999');
    }
    expect((await post(app, user, '/call/start', start('2024-02-29T23:59:59.123456+05:30'))).statusCode).toBe(200);
    const threads = await post(app, user, '/threads/stream_query', { project_id: project, filter: { after_datetime: '2025-02-30T00:00:00Z' } });
    expect(threads.statusCode).toBe(422);
    const cost = await post(app, user, '/cost/create', { project_id: project, costs: { m: { prompt_token_cost: 1, completion_token_cost: 1, effective_date: '2025-06-01T24:00:00Z' } } });
    expect(cost.statusCode).toBe(422);
    const query = (literal: unknown) => ({ project_id: project, query: { $expr: { $gt: [{ $getField: 'started_at' }, { $literal: literal }] } } });
    expect(await status(await post(app, user, '/calls/query', query('2025-02-30')))).toEqual([400, { reason: 'Literal "2025-02-30" cannot be compared as timestamptz' }]);
    expect(await status(await post(app, user, '/calls/query', query(1e20)))).toEqual([400, { reason: 'Literal 100000000000000000000 cannot be compared as timestamptz' }]);
    expect((await post(app, user, '/calls/query', query('2024-02-29'))).json().calls).toHaveLength(1);
  });
});

describe('bad values on read routes', () => {
  it('answers a version beyond int4 with 404 and NUL in ids with 400', async () => {
    const project = newProject();
    await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'o', val: 1 } });
    expect(await status(await post(app, user, '/obj/read', { project_id: project, object_id: 'o', digest: 'v99999999999' }))).toEqual([404, { reason: 'Obj o:v99999999999 not found' }]);
    const nul = 'x\u0000';
    const cases: [string, unknown][] = [
      ['/calls/query', { project_id: project, filter: { call_ids: [nul] } }],
      ['/calls/stream_query', { project_id: project, filter: { call_ids: [nul] } }],
      ['/calls/delete', { project_id: project, call_ids: [nul] }],
      ['/obj/read', { project_id: project, object_id: nul, digest: 'latest' }],
      ['/file/content', { project_id: project, digest: nul }],
      ['/table/query', { project_id: project, digest: nul }],
      ['/refs/read_batch', { refs: [`weave:///${project}/object/o:${nul}`] }],
      ['/feedback/purge', { project_id: project, query: { $expr: { $eq: [{ $getField: 'id' }, { $literal: nul }] } } }],
    ];
    for (const [url, body] of cases) expect(await status(await post(app, user, url, body)), url).toEqual([400, { reason: NUL_REASON }]);
  });
});

describe('field names that are prototype keys', () => {
  it('treats constructor, toString and __proto__ as unknown fields (403)', async () => {
    const project = newProject();
    for (const field of ['constructor', 'toString', 'hasOwnProperty']) {
      const query = { $expr: { $eq: [{ $getField: field }, { $literal: 'x' }] } };
      expect(await status(await post(app, user, '/calls/query', { project_id: project, query })), field).toEqual([403, { reason: `Invalid field "${field}": not a column of calls` }]);
      expect(await status(await post(app, user, '/feedback/query', { project_id: project, fields: [field] })), field).toEqual([403, { reason: `Invalid field "${field}": not a field of feedback` }]);
      expect(await status(await post(app, user, '/cost/query', { project_id: project, fields: [field] })), field).toEqual([403, { reason: `Invalid field "${field}": not a field of llm_prices` }]);
    }
    const sorted = await post(app, user, '/calls/query', { project_id: project, sort_by: [{ field: '__proto__', direction: 'asc' }] });
    expect(await status(sorted)).toEqual([403, { reason: 'Invalid field "__proto__": not a column of calls' }]);
  });
});

describe('huge digit strings in JSON paths', () => {
  it('reads a stored 2,000-digit number as no number in filters and sorts', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: [...callItems(project, { id: 'huge', inputs: { n: '9'.repeat(2000) } }), ...callItems(project, { id: 'small', inputs: { n: 5 } })] });
    const filtered = await post(app, user, '/calls/query', { project_id: project, query: { $expr: { $gt: [{ $getField: 'inputs.n' }, { $literal: 1 }] } } });
    expect([filtered.statusCode, filtered.json().calls.map((c: { id: string }) => c.id)]).toEqual([200, ['small']]);
    const sorted = await post(app, user, '/calls/query', { project_id: project, sort_by: [{ field: 'inputs.n', direction: 'desc' }] });
    expect([sorted.statusCode, sorted.json().calls.map((c: { id: string }) => c.id)]).toEqual([200, ['small', 'huge']]);
  });
});

describe('an OTel export with spans out of range', () => {
  it('rejects spans with out-of-range times and stores the rest (NUL in a name is replaced)', async () => {
    const project = newProject();
    const span = (spanId: string, extra: Record<string, unknown>) => ({
      traceId: '0af7651916cd43dd8448eb211c80319c', spanId, name: 'ok', startTimeUnixNano: '1735689600000000000', endTimeUnixNano: '1735689601000000000', ...extra,
    });
    const spans = [
      span('b7ad6b7169203331', { name: 'n\u0000ul' }),
      span('b7ad6b7169203332', { startTimeUnixNano: '99999999999999999999999' }),
      span('b7ad6b7169203333', { attributes: [{ key: 'langfuse.startTime', value: { stringValue: '+275760-09-13T00:00:00.000Z' } }] }),
    ];
    const response = await app.inject({
      method: 'POST',
      url: '/traces/otel/v1/traces',
      headers: { authorization: user.headers.authorization, 'content-type': 'application/json', project_id: project },
      payload: { resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans }] }] },
    });
    expect(await status(response)).toEqual([
      200,
      {
        partialSuccess: {
          rejectedSpans: 2,
          errorMessage:
            '2 span(s) rejected: span b7ad6b7169203332 "ok": startTimeUnixNano 99999999999999999999999 ns is out of range (years 1970 to 9999); ' +
            'span b7ad6b7169203333 "ok": langfuse.startTime "+275760-09-13T00:00:00.000Z" is out of range (years 1 to 9999)',
        },
      },
    ]);
    const calls = (await post(app, user, '/calls/query', { project_id: project })).json().calls;
    expect(calls.map((c: { id: string; op_name: string }) => [c.id, c.op_name])).toEqual([['b7ad6b7169203331', 'n\ufffdul']]);
  });
});

describe('prices', () => {
  it('refuses a per-token price above 1e6 with 422', async () => {
    const project = newProject();
    const response = await post(app, user, '/cost/create', { project_id: project, costs: { m: { prompt_token_cost: 1e300, completion_token_cost: 1 } } });
    expect(response.statusCode).toBe(422);
    expect(response.json().detail[0].loc).toEqual(['body', 'costs', 'm', 'prompt_token_cost']);
  });
});
