import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, createGatewayApp, openaiClient } from './gateway-helpers.js';
import { waitFor } from './helpers.js';

let engine: FakeEngine;
let app: App;
let user: TestUser;
let client: OpenAI;
let closeClient: () => Promise<void>;

beforeAll(async () => {
  engine = await startFakeEngine({ chunks: 5 });
  app = await createGatewayApp([backendEntry('local', [engine.url])]);
  const url = await listen(app);
  user = await createUserWithKey(app);
  ({ client, close: closeClient } = openaiClient(`${url}/v1`, user.key));
});
afterAll(async () => {
  await closeClient();
  await app.close();
  await engine.close();
});

const messages = [{ role: 'user' as const, content: 'Hi' }];
const lastChat = () => engine.chatRequests().at(-1)!;

describe('the openai SDK against the gateway', () => {
  it('creates a non-streaming completion', async () => {
    const completion = await client.chat.completions.create({ model: 'fake/base-model', messages });
    expect(completion).toMatchObject({
      object: 'chat.completion',
      model: 'fake/base-model',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hello from the fake engine' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 },
    });
  });

  it('forwards x-request-id upstream and returns it', async () => {
    const { data, response } = await client.chat.completions
      .create({ model: 'fake/base-model', messages }, { headers: { 'x-request-id': 'req-sdk-1' } })
      .withResponse();
    expect(lastChat().headers['x-request-id']).toBe('req-sdk-1');
    expect(response.headers.get('x-request-id')).toBe('req-sdk-1');
    expect(data.id).toBe('chatcmpl-req-sdk-1');
  });

  it('streams without a usage chunk when the client did not ask for one, though the engine was asked', async () => {
    const stream = await client.chat.completions.create({ model: 'fake/base-model', messages, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello from the fake engine');
    expect(chunks.every((c) => !c.usage)).toBe(true);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe('stop');
    expect(lastChat().body).toMatchObject({ stream: true, stream_options: { include_usage: true, continuous_usage_stats: false } });
  });

  it('streams the usage chunk when the client asked for it', async () => {
    const stream = await client.chat.completions.create({ model: 'fake/base-model', messages, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 } });
    expect(chunks.filter((c) => c.usage)).toHaveLength(1);
  });

  it('lists models', async () => {
    const ids = [];
    for await (const model of client.models.list()) ids.push(model);
    expect(ids).toContainEqual({
      id: 'fake/base-model',
      object: 'model',
      created: expect.any(Number),
      owned_by: 'vllm',
      root: 'fake/base-model',
      parent: null,
      max_model_len: 4096,
      permission: [expect.objectContaining({ object: 'model_permission' })],
    });
  });

  it('surfaces an unknown model as NotFoundError with code and param', async () => {
    const error = await client.chat.completions.create({ model: 'nobody/has/this', messages }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect(error).toMatchObject({ status: 404, code: 'model_not_found', param: 'model', type: 'invalid_request_error' });
  });

  it('surfaces an OpenAI route the gateway does not serve as NotFoundError, in OpenAI\'s envelope', async () => {
    const error = await client.embeddings.create({ model: 'fake/base-model', input: 'Hi' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect(error).toMatchObject({ status: 404, code: 'not_found', type: 'invalid_request_error', message: '404 No route for POST /v1/embeddings.' });
    for (const [method, url] of [['POST', '/v1/embeddings'], ['POST', '/v1/responses'], ['GET', '/v1/files?purpose=batch']] as const) {
      const response = await app.inject({ method, url, headers: user.headers, payload: method === 'POST' ? { model: 'fake/base-model' } : undefined });
      expect(response.statusCode).toBe(404);
      expect(response.json()).toEqual({
        error: { message: `No route for ${method} ${url.split('?')[0]}.`, type: 'invalid_request_error', param: null, code: 'not_found' },
      });
    }
    // The other families under /v1 keep the training form.
    for (const url of ['/v1/preview/nothing', '/v1/health/nothing', '/v1/system-check/nothing', '/v1/admin/nothing', '/v1/workers/nothing', '/v1/projects/nothing']) {
      expect((await app.inject({ method: 'GET', url, headers: user.headers })).json()).toEqual({ detail: `No route for GET ${url}.` });
    }
  });

  it('surfaces a validation failure as UnprocessableEntityError with code and param', async () => {
    const error = await client.chat.completions.create({ model: 'fake/base-model', messages, temperature: 3 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.UnprocessableEntityError);
    expect(error).toMatchObject({ status: 422, code: 'less_than_equal', param: 'temperature' });
  });

  it('surfaces a bad key as AuthenticationError', async () => {
    const other = openaiClient(client.baseURL, 'ty-not-a-key');
    const error = await other.client.chat.completions.create({ model: 'fake/base-model', messages }).catch((e: unknown) => e);
    await other.close();
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(error).toMatchObject({ status: 401, code: 'invalid_api_key' });
  });

  it('surfaces an engine 429 as RateLimitError with the engine\'s Retry-After', async () => {
    engine.setBehaviour({ kind: 'status', status: 429, message: 'Too many requests', retryAfter: '30' }, 3);
    const error = await client.chat.completions.create({ model: 'fake/base-model', messages }).catch((e: unknown) => e);
    engine.setBehaviour({ kind: 'ok' });
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(error).toMatchObject({ status: 429, code: 'rate_limit_exceeded', message: '429 Too many requests' });
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).headers.get('retry-after')).toBe('30');
  });

  it('surfaces an engine 400 with its status, message and param as BadRequestError', async () => {
    engine.setBehaviour({ kind: 'status', status: 400, message: "This model's maximum context length is 4096 tokens." }, 1);
    const rejected = await client.chat.completions.create({ model: 'fake/base-model', messages }).catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(OpenAI.BadRequestError);
    expect(rejected).toMatchObject({ status: 400, message: "400 This model's maximum context length is 4096 tokens." });
  });

  it('an in-stream failure throws an APIError in the SDK', async () => {
    engine.setBehaviour({ kind: 'drop-after', chunks: 2 }, 1);
    const stream = await client.chat.completions.create({ model: 'fake/base-model', messages, stream: true });
    const received: string[] = [];
    const error = await (async () => {
      for await (const chunk of stream) received.push(chunk.choices[0]?.delta.content ?? '');
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toMatch(/broke off mid-response/);
    expect(received.join('')).toBe('Hello from');
  });

  it('breaking out of a stream aborts the engine request', async () => {
    engine.options.chunks = 200;
    engine.options.chunkDelayMs = 20;
    try {
      const before = engine.disconnects.length;
      const stream = await client.chat.completions.create({ model: 'fake/base-model', messages, stream: true });
      let seen = 0;
      for await (const _chunk of stream) if (++seen === 3) break;
      await waitFor(() => engine.disconnects.length > before);
      expect(engine.disconnects.at(-1)!.chunksSent).toBeLessThan(50);
    } finally {
      engine.options.chunks = 5;
      engine.options.chunkDelayMs = 0;
    }
  });
});
