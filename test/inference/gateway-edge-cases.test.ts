import net from 'node:net';
import { sql } from 'kysely';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, type TestUser } from '../helpers/app.js';
import { createTenants } from '../helpers/tenants.js';
import { listen } from '../helpers/listen.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { startBlackhole } from './blackhole.js';
import { addCheckpoint, backendEntry, chat, checkpointAdapter, createTrainedModel, openaiClient, sseData, writeBackendsFile, usageRow } from './gateway-helpers.js';
import { waitFor } from './helpers.js';

/**
 * The gateway's edge cases: routing off the request path, request ids that are no header value, timeouts
 * and breaker accounting, adapter naming across re-created models, the model name in answers, engine
 * credentials, metering of refused requests, and clients gone before the handler starts.
 */

let engine: FakeEngine;
let aliased: FakeEngine;
let locked: FakeEngine;
let hole: { url: string; close(): Promise<void> };
let app: App;
let url: string;
let owner: TestUser;
let other: TestUser;
/** Requests the test hook holds back until their client has gone. */
const holdUntilGone = new Set<string>();

beforeAll(async () => {
  engine = await startFakeEngine({ loadDelayMs: 20 });
  aliased = await startFakeEngine({ models: ['fake/alias-model'], reportModel: 'served-under-another-name' });
  locked = await startFakeEngine({ models: ['fake/locked-model'], apiKey: 'right-key' });
  hole = await startBlackhole();
  app = await createTestApp(
    {
      BACKENDS_FILE: writeBackendsFile([
        backendEntry('main', [engine.url], {
          adapter_paths: [{ prefix: 's3://ckpts/', path: '/mnt/ckpts/' }],
          timeouts: { first_byte_ms: 200, adapter_load_ms: 2_000 },
        }),
        backendEntry('aliased', [aliased.url], { models: ['fake/alias-model'] }),
        backendEntry('locked', [locked.url], { models: ['fake/locked-model'], api_key_env: 'LOCKED_KEY' }),
        // Discovery of this one hangs until its timeout: nothing on the request path may wait for it.
        backendEntry('unreachable', [hole.url], { models: 'discover', timeouts: { connect_ms: 10_000, first_byte_ms: 10_000 } }),
      ]),
      USAGE_FLUSH_INTERVAL_MS: '50',
      LOCKED_KEY: 'wrong-key',
    },
    (instance) => {
      instance.addHook('preHandler', async (request) => {
        if (!holdUntilGone.has(String(request.headers['x-request-id']))) return;
        await waitFor(() => request.raw.socket?.destroyed === true, 5_000);
      });
    },
  );
  url = await listen(app);
  ({ owner, other } = await createTenants(app));
  await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'agent', steps: [1] });
});
afterAll(async () => {
  // The blackhole first: its connections then fail, so the app's hanging discovery ends at once.
  await hole.close();
  await app.close();
  await Promise.all([engine.close(), aliased.close(), locked.close()]);
});

const post = (user: TestUser, body: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...user.headers, ...headers }, payload: body as object });
const lastBody = () => engine.chatRequests().at(-1)!.body as Record<string, unknown>;


describe('routing off the request path', () => {
  // First in the file: the hanging backend's first discovery is still under way.
  it('serves a checkpoint without waiting for a backend\'s model discovery', async () => {
    // Warm the key and the adapter (base models are a map lookup; they never waited).
    expect((await post(owner, chat('fake/base-model'))).statusCode).toBe(200);
    const started = Date.now();
    const response = await post(owner, chat(`${owner.entity}/proj/agent:step1`));
    expect(response.statusCode, response.body).toBe(200);
    // The hanging discovery takes 10 s.
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

describe('request ids', () => {
  it('accepts any string as a body request_id, as vLLM does, and percent-encodes one that cannot be a header value', async () => {
    for (const id of ['日本', 'a\nb', 'with space', 'x'.repeat(300)]) {
      const response = await post(owner, chat('fake/base-model', { request_id: id }));
      expect(response.statusCode, response.body).toBe(200);
      const sent = /^[\x21-\x7e]+$/.test(id) ? id : encodeURIComponent(id);
      expect(response.headers['x-request-id']).toBe(sent);
      expect(engine.chatRequests().at(-1)!.headers['x-request-id']).toBe(sent);
    }
  });

  it('keeps the circuit closed for every tenant after SDK calls send a request_id that is no header value', async () => {
    const { client, close } = openaiClient(`${url}/v1`, owner.key, { maxRetries: 2 });
    try {
      for (let i = 0; i < 2; i++) {
        const { data, response } = await client.chat.completions
          .create({ model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi' }], request_id: '日本\n' } as never)
          .withResponse();
        expect(data.object).toBe('chat.completion');
        expect(response.headers.get('x-request-id')).toBe(encodeURIComponent('日本\n'));
      }
    } finally {
      await close();
    }
    const response = await post(other, chat('fake/base-model'));
    expect(response.statusCode, response.body).toBe(200);
  });
});

describe('timeouts', () => {
  it('waits for a non-streaming completion longer than first_byte_ms (vLLM sends nothing until done)', async () => {
    engine.options.latencyMs = 500;
    try {
      const response = await post(owner, chat('fake/base-model'));
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json().choices[0].message.content).toBe('Hello from the');
    } finally {
      engine.options.latencyMs = 0;
    }
  });
});

describe('adapter names', () => {
  it('never serve a re-created model the deleted model\'s weights still loaded under its name', async () => {
    const first = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'reborn', steps: [1] });
    expect((await post(owner, chat(`${owner.entity}/proj/reborn:step1`))).statusCode).toBe(200);
    const oldAdapter = lastBody().model as string;
    expect(engine.adapters.get(oldAdapter)).toBe('/mnt/ckpts/reborn/1');
    // Deleted without the unload reaching the engine (another process, an engine that was down).
    await sql`delete from checkpoints where model_id = ${first.id}`.execute(app.db);
    await sql`delete from models where id = ${first.id}`.execute(app.db);
    const second = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'reborn' });
    await addCheckpoint(app, second.id, 1, 's3://ckpts/reborn-v2/1');
    // A fresh key: the first one's route is cached for a second.
    const { key } = await app.auth.createKey({ username: owner.username });
    const response = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}` },
      payload: chat(`${owner.entity}/proj/reborn:step1`),
    });
    expect(response.statusCode).toBe(200);
    const newAdapter = lastBody().model as string;
    expect(newAdapter).toBe(await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'reborn', step: 1 }));
    expect(newAdapter).not.toBe(oldAdapter);
    expect(engine.adapters.get(newAdapter)).toBe('/mnt/ckpts/reborn-v2/1');
  });

  it('answer a step beyond the step column\'s range with 404 model_not_found', async () => {
    const response = await post(owner, chat(`${owner.entity}/proj/agent:step3000000000`));
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({
      error: {
        message: `The model ${owner.entity}/proj/agent has no checkpoint at step 3000000000.`,
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      },
    });
  });

  it('answer an adapter load that outlasts adapter_load_ms with 504 adapter_load_failed in the envelope', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'heavy', steps: [4] });
    engine.options.loadDelayMs = 3_000;
    try {
      const response = await post(owner, chat(`${owner.entity}/proj/heavy:step4`));
      const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'heavy', step: 4 });
      expect(response.statusCode).toBe(504);
      // Neither the engine's adapter name nor the weights' path reaches the tenant.
      expect(response.body).not.toContain(adapter);
      expect(response.body).not.toContain('/mnt/ckpts');
      expect(response.json()).toEqual({
        error: {
          message: `The engine did not load the weights of checkpoint ${owner.entity}/proj/heavy:step4 within the adapter load timeout of 2000 ms.`,
          type: 'server_error',
          param: null,
          code: 'adapter_load_failed',
        },
      });
    } finally {
      engine.options.loadDelayMs = 20;
    }
  });
});

describe('the model in answers', () => {
  it('is the id the client sent even when the engine names the model otherwise, JSON and every chunk', async () => {
    const response = await post(owner, chat('fake/alias-model'));
    expect(response.statusCode).toBe(200);
    expect(response.json().model).toBe('fake/alias-model');
    expect(response.body).not.toContain('served-under-another-name');

    const streamed = await post(owner, chat('fake/alias-model', { stream: true }));
    const chunks = sseData(streamed.body).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    expect(chunks.length).toBeGreaterThan(2);
    for (const chunk of chunks) expect(chunk.model).toBe('fake/alias-model');
  });
});

describe('engine credentials', () => {
  it('are the gateway\'s problem: an engine 401 is a 502 upstream_unauthorized naming the key variable', async () => {
    // The fix (the key variable) is in the server log; the tenant reads no backend, replica or variable name.
    const expected = "The engine refused the gateway's credentials; the operator has to fix the gateway's configuration (the server log says how).";
    const response = await post(owner, chat('fake/locked-model'));
    expect(response.statusCode).toBe(502);
    expect(response.json()).toEqual({ error: { message: expected, type: 'server_error', param: null, code: 'upstream_unauthorized' } });

    const { client, close } = openaiClient(`${url}/v1`, owner.key);
    try {
      const error = await client.chat.completions.create({ model: 'fake/locked-model', messages: [{ role: 'user', content: 'Hi' }] }).catch((err: unknown) => err);
      expect(error).not.toBeInstanceOf(OpenAI.AuthenticationError);
      expect(error).toBeInstanceOf(OpenAI.InternalServerError);
      expect(error).toMatchObject({ status: 502, code: 'upstream_unauthorized', error: { message: expected } });
    } finally {
      await close();
    }
  });
});

describe('metering', () => {
  it('writes nothing for a request refused for its priority, as for any invalid input', async () => {
    const response = await post(owner, chat('fake/base-model', { priority: 5 }), { 'x-request-id': 'refused-priority-1' });
    expect(response.statusCode).toBe(422);
    // A later request's row is written; the refused one's never is.
    expect((await post(owner, chat('fake/base-model'), { 'x-request-id': 'accepted-priority-2' })).statusCode).toBe(200);
    await usageRow(app, 'accepted-priority-2');
    expect(await app.db.selectFrom('usage_records').select('id').where('request_id', '=', 'refused-priority-1').execute()).toEqual([]);
  });
});

describe('a client gone before the handler starts', () => {
  it('costs no engine request', async () => {
    const before = engine.chatRequests().length;
    const body = JSON.stringify(chat('fake/base-model'));
    const socket = net.connect(new URL(url).port ? Number(new URL(url).port) : 80, new URL(url).hostname);
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    holdUntilGone.add('review-gone-1');
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: ${owner.headers.authorization}\r\n` +
        `content-type: application/json\r\nx-request-id: review-gone-1\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.destroy();
    const row = await usageRow(app, 'review-gone-1');
    expect(row).toMatchObject({ outcome: 'client_disconnected', status: 499, error_code: 'client_closed_request' });
    expect(engine.chatRequests().length).toBe(before);
  });
});
