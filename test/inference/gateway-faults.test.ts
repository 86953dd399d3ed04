import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { buildApp } from '../../src/app.js';
import { createUserWithKey, testConfig, type TestUser } from '../helpers/app.js';
import { createTenants, expectOtherTenantRefused } from '../helpers/tenants.js';
import { freshDatabase } from '../helpers/database.js';
import { listen } from '../helpers/listen.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import OpenAI from 'openai';
import { backendEntry, chat, createGatewayApp, createTrainedModel, modelNotFoundBody, openaiClient, sseData, undiciClient, writeBackendsFile, usageRow } from './gateway-helpers.js';
import { deadUrl, waitFor } from './helpers.js';

let healthy: FakeEngine;
let slow: FakeEngine;
let app: App;
/** Requests that read a stream as it arrives, over a dispatcher closed before the app. */
const undici = undiciClient();
let url: string;
let user: TestUser;

beforeAll(async () => {
  healthy = await startFakeEngine({ chunks: 4 });
  slow = await startFakeEngine({ models: ['fake/slow-model'], chunks: 50, chunkDelayMs: 20 });
  const dead = await deadUrl(() => startFakeEngine());
  const alsoDead = await deadUrl(() => startFakeEngine());
  app = await createGatewayApp([
    // One replica refuses connections; the other serves.
    backendEntry('pair', [dead, healthy.url]),
    backendEntry('gone', [dead, alsoDead], { models: ['fake/gone-model'] }),
    backendEntry('slow', [slow.url], { models: ['fake/slow-model'], timeouts: { first_byte_ms: 300 } }),
  ]);
  url = await listen(app);
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await undici.close();
  await app.close();
  await Promise.all([healthy.close(), slow.close()]);
});

const post = (body: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...user.headers, ...headers }, payload: body as object });


describe('replica faults', () => {
  it('serves from another replica when one is down', async () => {
    for (let i = 0; i < 4; i++) {
      const response = await post(chat('fake/base-model'));
      expect(response.statusCode, response.body).toBe(200);
    }
  });

  it('answers 503 with Retry-After when every replica is down, naming no replica or backend', async () => {
    const response = await post(chat('fake/gone-model'));
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('1');
    expect(response.json()).toEqual({
      error: { message: 'The engine serving this model could not be reached; try again shortly.', type: 'server_error', param: null, code: 'upstream_unreachable' },
    });
  });

  it("keeps an engine's 500 and 501 with the engine's own message", async () => {
    healthy.setBehaviour({ kind: 'status', status: 500, message: 'Internal server error' }, 1);
    const response = await post(chat('fake/base-model'));
    expect(response.statusCode).toBe(500);
    expect(response.json()).toEqual({ error: { message: 'Internal server error', type: 'server_error', param: null, code: 'engine_error' } });
    expect(response.body).not.toContain('127.0.0.1');

    healthy.setBehaviour({ kind: 'status', status: 501, message: 'beam search is not implemented for this model' }, 1);
    const unimplemented = await post(chat('fake/base-model'));
    expect(unimplemented.statusCode).toBe(501);
    expect(unimplemented.json()).toEqual({
      error: { message: 'beam search is not implemented for this model', type: 'server_error', param: null, code: 'not_implemented' },
    });
  });

  it('tells the openai SDK of an engine failure without the engine topology', async () => {
    const { client, close } = openaiClient(`${url}/v1`, user.key);
    try {
      const error = await client.chat.completions.create({ model: 'fake/gone-model', messages: [{ role: 'user', content: 'Hi' }] }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(OpenAI.InternalServerError);
      expect(error).toMatchObject({ status: 503, code: 'upstream_unreachable', message: '503 The engine serving this model could not be reached; try again shortly.' });
      expect((error as InstanceType<typeof OpenAI.APIError>).headers?.get('retry-after')).toBe('1');
    } finally {
      await close();
    }
  });

  it('keeps an engine 4xx status and message', async () => {
    healthy.setBehaviour({ kind: 'status', status: 400, message: "'max_tokens' is too large: 9999." }, 1);
    const response = await post(chat('fake/base-model'));
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ error: { message: "'max_tokens' is too large: 9999.", type: 'invalid_request_error', param: null, code: 'invalid_request' } });
  });

  it('answers a streaming hang with 504 upstream_timeout after the time-to-first-byte timeout', async () => {
    slow.setBehaviour({ kind: 'hang' }, 1);
    const started = Date.now();
    const response = await post(chat('fake/slow-model', { stream: true }));
    expect(response.statusCode).toBe(504);
    expect(response.json().error).toMatchObject({ code: 'upstream_timeout', type: 'server_error', message: expect.stringContaining('first byte timeout of 300 ms') });
    expect(Date.now() - started).toBeLessThan(3_000);
    await waitFor(() => slow.disconnects.length > 0);
  });

  it('answers a stream that sends headers but no token with a JSON 504, not a stream', async () => {
    slow.setBehaviour({ kind: 'hang-after-headers' }, 1);
    const response = await post(chat('fake/slow-model', { stream: true }));
    expect(response.statusCode).toBe(504);
    expect(response.headers['content-type']).toMatch(/application\/json/);
    expect(response.json().error.code).toBe('upstream_timeout');
  });
});

describe('a backend that discovers its models while its engines are still starting', () => {
  it('answers 503 with Retry-After for base models and checkpoints until an engine has answered, then 404 for names no engine serves', async () => {
    // Nothing listens at the replica yet: vLLM is still loading its weights (docker compose --profile gpu).
    const replica = await deadUrl(() => startFakeEngine());
    const local = await createGatewayApp([backendEntry('vllm', [replica], { models: 'discover' })]);
    let engine: FakeEngine | undefined;
    try {
      const { owner, other } = await createTenants(local);
      await createTrainedModel(local, { entity: owner.entity, project: 'proj', name: 'agent', steps: [1] });
      const ask = (as: TestUser, model: string) => local.inject({ method: 'POST', url: '/v1/chat/completions', headers: as.headers, payload: chat(model) });
      const checkpoint = `${owner.entity}/proj/agent:step1`;

      for (const model of ['fake/base-model', 'nobody/serves-this', `${owner.entity}/proj/agent`, checkpoint]) {
        const response = await ask(owner, model);
        expect(response.statusCode, model).toBe(503);
        expect(response.headers['retry-after']).toBe('1');
        expect(response.json()).toEqual({
          error: { message: 'The engine serving this model could not be reached; try again shortly.', type: 'server_error', param: null, code: 'upstream_unreachable' },
        });
      }
      // Another tenant's checkpoint still reads exactly like one that does not exist. (Background
      // writes settle first: the key's last-used stamp.)
      await local.inject({ method: 'GET', url: '/v1/usage', headers: other.headers });
      await local.inject({ method: 'GET', url: '/v1/usage', headers: other.headers });
      for (const modelId of [checkpoint, `${owner.entity}/proj/nothing-here`]) {
        await expectOtherTenantRefused(
          local,
          { method: 'POST', url: '/v1/chat/completions', headers: other.headers, payload: chat(modelId) },
          {
            status: 404,
            body: modelNotFoundBody(modelId),
            secrets: ['fake/base-model'],
          },
        );
      }

      engine = await startFakeEngine({ port: Number(new URL(replica).port) });
      // An unknown name has the engines' lists read again, at most every 5 s.
      let response = await ask(owner, 'fake/base-model');
      for (const end = Date.now() + 15_000; response.statusCode === 503 && Date.now() < end; response = await ask(owner, 'fake/base-model')) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(response.statusCode, response.body).toBe(200);
      expect((await ask(owner, checkpoint)).statusCode).toBe(200);
      // The engine has answered: a name it does not serve is unknown.
      const unknown = await ask(owner, 'nobody/serves-this');
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json().error).toMatchObject({ code: 'model_not_found', message: 'The model `nobody/serves-this` does not exist or you do not have access to it.' });
    } finally {
      await local.close();
      await engine?.close();
    }
  });
});

describe('mid-stream failures', () => {
  it('become an error event followed by [DONE]', async () => {
    healthy.setBehaviour({ kind: 'drop-after', chunks: 2 }, 1);
    const response = await post(chat('fake/base-model', { stream: true }));
    expect(response.statusCode).toBe(200);
    const data = sseData(response.body);
    expect(data.at(-1)).toBe('[DONE]');
    expect(JSON.parse(data.at(-2)!)).toEqual({
      error: { message: expect.stringMatching(/^The engine broke off mid-response: /), type: 'server_error', param: null, code: 'upstream_error' },
    });
    expect(response.body).not.toMatch(/replica|backend|127\.0\.0\.1/);
    expect(data.slice(0, -2).map((d) => JSON.parse(d).choices[0].delta.content)).toEqual(['', 'Hello', ' from']);
  });

  it('pass an engine\'s own error event on in the OpenAI envelope, with [DONE]', async () => {
    healthy.setBehaviour({ kind: 'error-event-after', chunks: 1 }, 1);
    const response = await post(chat('fake/base-model', { stream: true }));
    const data = sseData(response.body);
    expect(data.at(-2)).toBe('{"error":{"message":"Internal server error","type":"server_error","param":null,"code":"upstream_error"}}');
    expect(data.at(-1)).toBe('[DONE]');
    expect(data.filter((d) => d === '[DONE]')).toHaveLength(1);
  });

  it('sends chunks as the engine does, not at the end', async () => {
    const response = await undici.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...user.headers, 'content-type': 'application/json' },
      body: JSON.stringify(chat('fake/slow-model', { stream: true })),
    });
    expect(response.headers['content-type']).toBe('text/event-stream');
    expect(response.headers['content-encoding']).toBeUndefined();
    const arrivals: number[] = [];
    for await (const _chunk of response.body) arrivals.push(Date.now());
    // 50 chunks 20 ms apart arrive over about a second, in many reads.
    expect(arrivals.length).toBeGreaterThan(20);
    expect(arrivals.at(-1)! - arrivals[0]).toBeGreaterThan(500);
  });
});

describe('usage records', () => {
  it('records a success with the engine\'s token counts', async () => {
    const response = await post(chat('fake/base-model'), { 'x-request-id': 'usage-ok-1' });
    expect(response.statusCode).toBe(200);
    expect(await usageRow(app, 'usage-ok-1')).toMatchObject({
      entity: user.entity,
      project: 'inference',
      api_key_id: user.keyId,
      model: 'fake/base-model',
      base_model: 'fake/base-model',
      backend: 'pair',
      stream: false,
      prompt_tokens: 7,
      completion_tokens: 4,
      cached_tokens: 0,
      estimated: false,
      outcome: 'success',
      status: 200,
      error_code: null,
      latency_ms: expect.any(Number),
      time_to_first_token_ms: expect.any(Number),
    });
  });

  it('records a streamed success from the usage chunk the client did not see', async () => {
    const response = await post(chat('fake/base-model', { stream: true }), { 'x-request-id': 'usage-stream-1' });
    expect(response.body).not.toContain('"usage"');
    expect(await usageRow(app, 'usage-stream-1')).toMatchObject({ stream: true, prompt_tokens: 7, completion_tokens: 4, outcome: 'success', estimated: false });
  });

  it('records a failure with its status and code', async () => {
    healthy.setBehaviour({ kind: 'status', status: 500 }, 1);
    await post(chat('fake/base-model'), { 'x-request-id': 'usage-fail-1' });
    expect(await usageRow(app, 'usage-fail-1')).toMatchObject({ outcome: 'error', status: 500, error_code: 'engine_error', prompt_tokens: 0 });
  });

  it('records a client that left mid-stream, with the tokens relayed so far, and aborts the engine', async () => {
    const before = slow.disconnects.length;
    const controller = new AbortController();
    const response = await undici.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...user.headers, 'content-type': 'application/json', 'x-request-id': 'usage-gone-1' },
      body: JSON.stringify(chat('fake/slow-model', { stream: true })),
      signal: controller.signal,
    });
    let seen = '';
    try {
      for await (const chunk of response.body) {
        seen += chunk.toString();
        if ((seen.match(/"content":"[^"]+"/g) ?? []).length >= 3) controller.abort();
      }
    } catch {
      // aborted
    }
    await waitFor(() => slow.disconnects.length > before);
    const row = await usageRow(app, 'usage-gone-1');
    expect(row).toMatchObject({ outcome: 'client_disconnected', status: 499, estimated: true, stream: true });
    expect(row.completion_tokens).toBeGreaterThanOrEqual(3);
    expect(row.completion_tokens).toBeLessThan(50);
  });

  it('records a client that left before the first token, and aborts the engine request', async () => {
    slow.options.latencyMs = 2_000;
    try {
      const before = slow.disconnects.length;
      const controller = new AbortController();
      const pending = undici.request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...user.headers, 'content-type': 'application/json', 'x-request-id': 'usage-gone-2' },
        body: JSON.stringify(chat('fake/slow-model')),
        signal: controller.signal,
      }).catch(() => undefined);
      await waitFor(() => slow.chatRequests().some((r) => r.headers['x-request-id'] === 'usage-gone-2'));
      controller.abort();
      await pending;
      await waitFor(() => slow.disconnects.length > before);
      expect(slow.disconnects.at(-1)!.chunksSent).toBe(0);
      expect(await usageRow(app, 'usage-gone-2')).toMatchObject({ outcome: 'client_disconnected', status: 499, completion_tokens: 0 });
    } finally {
      slow.options.latencyMs = 0;
    }
  });

  it('attributes usage to the Compat-Project or OpenAI-Project header, and refuses a project the key cannot reach', async () => {
    await post(chat('fake/base-model'), { 'compat-project': `${user.entity}/rollouts`, 'x-request-id': 'usage-proj-1' });
    expect(await usageRow(app, 'usage-proj-1')).toMatchObject({ entity: user.entity, project: 'rollouts' });
    await post(chat('fake/base-model'), { 'openai-project': `${user.entity}/evals`, 'x-request-id': 'usage-proj-2' });
    expect(await usageRow(app, 'usage-proj-2')).toMatchObject({ entity: user.entity, project: 'evals' });

    const refused = await post(chat('fake/base-model'), { 'compat-project': 'someone-else/secret' });
    expect(refused.statusCode).toBe(403);
    expect(refused.json()).toEqual({
      error: { message: 'This API key cannot reach project someone-else/secret.', type: 'invalid_request_error', param: 'Compat-Project', code: 'forbidden' },
    });
    // The refusal names the header the client sent.
    const viaOpenAi = await post(chat('fake/base-model'), { 'openai-project': 'someone-else/secret' });
    expect([viaOpenAi.statusCode, viaOpenAi.json()]).toEqual([
      403,
      { error: { message: 'This API key cannot reach project someone-else/secret.', type: 'invalid_request_error', param: 'OpenAI-Project', code: 'forbidden' } },
    ]);
  });

  it('sums a project\'s usage per model and per day', async () => {
    const project = `${user.entity}/sums`;
    for (const model of ['fake/base-model', 'fake/base-model', 'fake/slow-model']) {
      expect((await post(chat(model), { 'compat-project': project })).statusCode).toBe(200);
    }
    const get = (query: string) => app.inject({ method: 'GET', url: `/v1/usage?${query}`, headers: user.headers });
    const byModel = await get(`project=${project}&group_by=model`);
    expect(byModel.statusCode).toBe(200);
    expect(byModel.json()).toEqual({
      object: 'list',
      project,
      from: null,
      to: null,
      group_by: 'model',
      data: [
        { model: 'fake/base-model', requests: 2, errors: 0, prompt_tokens: 14, completion_tokens: 8, cached_tokens: 0, total_tokens: 22 },
        { model: 'fake/slow-model', requests: 1, errors: 0, prompt_tokens: 7, completion_tokens: 50, cached_tokens: 0, total_tokens: 57 },
      ],
    });
    const today = new Date().toISOString().slice(0, 10);
    const byDay = await get(`project=${project}&group_by=day&from=${today}`);
    expect(byDay.json().data).toEqual([{ day: today, requests: 3, errors: 0, prompt_tokens: 21, completion_tokens: 58, cached_tokens: 0, total_tokens: 79 }]);
    const total = await get(`project=${project}&to=2000-01-01`);
    expect(total.json()).toMatchObject({ to: '2000-01-01T00:00:00.000Z', data: [] });

    const refused = await get('project=someone-else/secret');
    expect(refused.statusCode).toBe(403);
    const bad = await get('from=yesterday');
    expect(bad.statusCode).toBe(422);
    expect(bad.json().detail[0].loc).toEqual(['query', 'from']);
    // ISO dates the database holds no instant for are named as the query's, not refused by the database.
    const outOfRange = await get(`from=0000-01-01&to=${encodeURIComponent('9999-12-31T23:59:59-23:59')}`);
    const range = 'the date must fall between 0001-01-01 and 9999-12-31 (UTC)';
    const outside = (field: string, input: string) => ({ type: 'value_error', loc: ['query', field], msg: `Value error, ${range}`, input, ctx: { error: range } });
    expect([outOfRange.statusCode, outOfRange.json()]).toEqual([
      422,
      {
        detail: [outside('from', '0000-01-01'), outside('to', '9999-12-31T23:59:59-23:59')],
        error: { code: 'value_error', message: `query.from: Value error, ${range}; query.to: Value error, ${range}`, param: 'from', type: 'invalid_request_error' },
      },
    ]);
    expect((await get(`from=0001-01-01&to=${encodeURIComponent('9999-12-31T23:59:59Z')}&project=${project}`)).json()).toMatchObject({ data: [{ requests: 3 }] });
  });
});

describe('shutdown', () => {
  it('writes buffered usage before the database closes', async () => {
    const database = await freshDatabase();
    let rowsAtClose = -1;
    const close = database.close.bind(database);
    database.close = async () => {
      const result = await sql<{ n: number }>`select count(*)::int as n from usage_records`.execute(database.db);
      rowsAtClose = Number(result.rows[0].n);
      await close();
    };
    const local = await buildApp(
      testConfig({ BACKENDS_FILE: writeBackendsFile([backendEntry('pair', [healthy.url])]), USAGE_FLUSH_INTERVAL_MS: '60000' }),
      { database },
    );
    await local.ready();
    const someone = await createUserWithKey(local);
    for (let i = 0; i < 3; i++) {
      const response = await local.inject({ method: 'POST', url: '/v1/chat/completions', headers: someone.headers, payload: chat('fake/base-model') });
      expect(response.statusCode).toBe(200);
    }
    await local.close();
    expect(rowsAtClose).toBe(3);
  });
});
