import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, chat, checkpointAdapter, createGatewayApp, createTrainedModel, modelNotFoundBody, openaiClient, sseData, undiciClient, usageRow } from './gateway-helpers.js';

/** The gateway against vLLM's request models: what vLLM accepts is accepted, and reaches the engine unchanged. */

let engine: FakeEngine;
let slow: FakeEngine;
let app: App;
/** Requests that read a stream as it arrives, over a dispatcher closed before the app. */
const undici = undiciClient();
let url: string;
let owner: TestUser;
let other: TestUser;

beforeAll(async () => {
  engine = await startFakeEngine({ chunks: 3 });
  // Answers only after a while: long enough for several keep-alive comments.
  slow = await startFakeEngine({ models: ['fake/slow-start'], latencyMs: 400 });
  app = await createGatewayApp(
    [backendEntry('main', [engine.url]), backendEntry('slow', [slow.url], { models: ['fake/slow-start'], runtime_lora: false })],
    { SSE_KEEPALIVE_MS: '50' },
  );
  url = await listen(app);
  owner = await createUserWithKey(app);
  other = await createUserWithKey(app);
  await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'agent', steps: [1, 2] });
});
afterAll(async () => {
  await undici.close();
  await app.close();
  await Promise.all([engine.close(), slow.close()]);
});

/** POSTs a body given as text, so that its number literals are exactly what the test wrote. */
const postText = (path: string, text: string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: path, headers: { ...owner.headers, 'content-type': 'application/json', ...headers }, payload: text });
const post = (path: string, body: unknown, user: TestUser = owner, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: path, headers: { ...user.headers, ...headers }, payload: body as object });

const lastRaw = () => engine.requests.at(-1)!.rawBody;

describe('integers', () => {
  it('forwards a 63-bit seed and integers above 2^53 digit for digit', async () => {
    for (const seed of ['9223372036854775807', '-9223372036854775808', '9007199254740993', '1234567890123456789']) {
      const response = await postText('/v1/chat/completions', `{"model":"fake/base-model","messages":[{"role":"user","content":"Hi"}],"seed":${seed}}`);
      expect(response.statusCode, response.body).toBe(200);
      expect(lastRaw()).toContain(`"seed":${seed}`);
    }
  });

  it('forwards long integers nested in free-form fields exactly, and leaves digits inside strings alone', async () => {
    const text =
      '{"model":"fake/base-model","messages":[{"role":"user","content":"12345678901234567890"}],' +
      '"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"integer","maximum":18446744073709551615}}}],"seed":7}';
    const response = await postText('/v1/chat/completions', text);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toContain('"maximum":18446744073709551615');
    expect(lastRaw()).toContain('"content":"12345678901234567890"');
  });

  it('checks int64 on the exact value: one past the end is a 422 naming the bound exactly', async () => {
    const before = engine.requests.length;
    const response = await postText('/v1/chat/completions', '{"model":"fake/base-model","messages":[{"role":"user","content":"Hi"}],"seed":9223372036854775808}');
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [{ type: 'less_than_equal', loc: ['body', 'seed'], msg: 'Input should be less than or equal to 9223372036854775807', input: '9223372036854775808' }],
      error: { message: 'body.seed: Input should be less than or equal to 9223372036854775807', type: 'invalid_request_error', param: 'seed', code: 'less_than_equal' },
    });
    const low = await postText('/v1/chat/completions', '{"model":"fake/base-model","messages":[{"role":"user","content":"Hi"}],"priority":-9223372036854775809}');
    expect(low.statusCode).toBe(422);
    expect(low.json().detail).toEqual([
      { type: 'greater_than_equal', loc: ['body', 'priority'], msg: 'Input should be greater than or equal to -9223372036854775808', input: '-9223372036854775809' },
    ]);
    expect(engine.requests.length).toBe(before);
  });

  it('names a priority past a double\'s range that the backend cannot schedule in a full 422 (its body was {})', async () => {
    const before = engine.requests.length;
    const response = await postText('/v1/chat/completions', '{"model":"fake/base-model","messages":[{"role":"user","content":"Hi"}],"priority":9223372036854775807}');
    expect(response.statusCode).toBe(422);
    const message =
      'Value error, priority 9223372036854775807 needs priority scheduling, which the backend serving fake/base-model does not use; send priority 0 or omit it';
    expect(response.json()).toEqual({
      error: { message: `body.priority: ${message}`, type: 'invalid_request_error', param: 'priority', code: 'value_error' },
      detail: [{ type: 'value_error', loc: ['body', 'priority'], msg: message, input: 9223372036854775807, ctx: { error: 'priority scheduling is not enabled' } }],
    });
    expect(engine.requests.length).toBe(before);
  });

  it('echoes a body holding a big integer in a 422 for another field (found by the fuzz run: it was a 500)', async () => {
    const response = await postText('/v1/chat/completions', '{"model":"","messages":[{"role":"user","content":"Hi"}],"priority":9223372036854775806}');
    expect(response.statusCode).toBe(422);
    expect(response.json().detail).toEqual([
      { type: 'missing', loc: ['body', 'model'], msg: 'Field required', input: { model: '', messages: [{ role: 'user', content: 'Hi' }], priority: 9223372036854775806 } },
    ]);
  });
});

describe('what vLLM accepts', () => {
  it('coerces lax scalars as pydantic does, and refuses what pydantic refuses', async () => {
    const response = await post('/v1/chat/completions', chat('fake/base-model', { max_tokens: '16', temperature: '0.5', logprobs: 'true', seed: '9223372036854775807' }));
    expect(response.statusCode, response.body).toBe(200);
    expect(engine.chatRequests().at(-1)!.body).toMatchObject({ max_tokens: 16, temperature: 0.5, logprobs: true });
    expect(lastRaw()).toContain('"seed":9223372036854775807');

    const streamed = await post('/v1/chat/completions', chat('fake/base-model', { stream: 'yes' }));
    expect(streamed.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(sseData(streamed.body).at(-1)).toBe('[DONE]');

    const bad = await post('/v1/chat/completions', chat('fake/base-model', { max_tokens: 'sixteen' }));
    expect(bad.statusCode).toBe(422);
    // pydantic says int_parsing here; the gateway's zod schemas report the number type.
    expect(bad.json().detail).toEqual([{ type: 'float_type', loc: ['body', 'max_tokens'], msg: 'Input should be a valid number', input: 'sixteen' }]);
  });

  it('accepts tools and a named tool_choice without type, and null descriptions and parameters', async () => {
    const tools = [{ function: { name: 'lookup', description: null, parameters: null } }];
    const choice = { function: { name: 'lookup' } };
    const response = await post('/v1/chat/completions', chat('fake/base-model', { tools, tool_choice: choice }));
    expect(response.statusCode, response.body).toBe(200);
    expect(engine.chatRequests().at(-1)!.body).toMatchObject({ tools, tool_choice: choice });

    const format = await post('/v1/chat/completions', chat('fake/base-model', { response_format: { type: 'json_schema', json_schema: { name: 'x', description: null, schema: { type: 'object' } } } }));
    expect(format.statusCode, format.body).toBe(200);
  });

  it('accepts content parts without type that carry their media, and refuses a part with neither', async () => {
    const parts = [{ image_url: { url: 'data:image/png;base64,AAAA' } }, { audio_url: { url: 'https://example.com/a.wav' } }, { video_url: { url: 'https://example.com/v.mp4' } }, { type: 'text', text: 'what is this?' }];
    const response = await post('/v1/chat/completions', { model: 'fake/base-model', messages: [{ role: 'user', content: parts }] });
    expect(response.statusCode, response.body).toBe(200);
    expect(engine.chatRequests().at(-1)!.body).toMatchObject({ messages: [{ role: 'user', content: parts }] });

    const bad = await post('/v1/chat/completions', { model: 'fake/base-model', messages: [{ role: 'user', content: [{ text: 'no type' }] }] });
    expect(bad.statusCode).toBe(422);
    expect(bad.json().detail[0]).toMatchObject({ loc: ['body', 'messages', 0, 'content', 0], type: 'value_error' });
  });

  it('bounds every list and string, answering more with a 422 naming the field', async () => {
    const before = engine.requests.length;
    const tooManyStops = await post('/v1/chat/completions', chat('fake/base-model', { stop: Array.from({ length: 65_537 }, () => 'x') }));
    expect(tooManyStops.statusCode).toBe(422);
    expect(tooManyStops.json().detail[0]).toMatchObject({ type: 'too_long', loc: ['body', 'stop'] });
    expect(tooManyStops.json().error.param).toBe('stop');

    const longId = await post('/v1/chat/completions', chat('fake/base-model', { request_id: 'r'.repeat(513) }));
    expect(longId.statusCode).toBe(422);
    expect(longId.json().detail[0]).toMatchObject({ type: 'string_too_long', loc: ['body', 'request_id'] });

    const longModel = await post('/tokenize', { model: 'm'.repeat(5_000), prompt: 'hi' });
    expect(longModel.statusCode).toBe(422);
    expect(longModel.json().detail[0]).toMatchObject({ type: 'string_too_long', loc: ['body', 'model'] });
    expect(engine.requests.length).toBe(before);
  });
});

describe('request ids', () => {
  it('keys the request by X-Request-Id when the body has a request_id too, as vLLM does', async () => {
    const response = await post('/v1/chat/completions', chat('fake/base-model', { request_id: 'from-body-1' }), owner, { 'x-request-id': 'from-header-1' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['x-request-id']).toBe('from-header-1');
    expect(engine.chatRequests().at(-1)!.headers['x-request-id']).toBe('from-header-1');
    expect(response.json().id).toBe('chatcmpl-from-header-1');
    expect(await usageRow(app, 'from-header-1')).toMatchObject({ outcome: 'success' });
  });

  it('uses the body request_id without a header', async () => {
    const response = await post('/v1/chat/completions', chat('fake/base-model', { request_id: 'from-body-2' }));
    expect(response.headers['x-request-id']).toBe('from-body-2');
    expect(engine.chatRequests().at(-1)!.headers['x-request-id']).toBe('from-body-2');
  });
});

describe('streams waiting for their first token', () => {
  it('send SSE keep-alive comments until the engine answers, which the openai SDK reads through', async () => {
    const response = await undici.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...owner.headers, 'content-type': 'application/json', 'x-request-id': 'keepalive-1' },
      body: JSON.stringify(chat('fake/slow-start', { stream: true })),
    });
    const text = await response.body.text();
    expect(response.statusCode).toBe(200);
    expect(text.startsWith(': keep-alive\n\n')).toBe(true);
    const data = sseData(text.replaceAll(': keep-alive\n\n', ''));
    expect(data.at(-1)).toBe('[DONE]');
    expect(JSON.parse(data[1]).choices[0].delta.content).toBe('Hello');
    expect(await usageRow(app, 'keepalive-1')).toMatchObject({ outcome: 'success', prompt_tokens: 7, completion_tokens: 3, stream: true });

    const { client, close } = openaiClient(`${url}/v1`, owner.key);
    try {
      const stream = await client.chat.completions.create({ model: 'fake/slow-start', messages: [{ role: 'user', content: 'Hi' }], stream: true });
      let content = '';
      for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? '';
      expect(content).toBe('Hello from the');
    } finally {
      await close();
    }
  });

  it('tell a failure after the keep-alives as an error event, metered once', async () => {
    slow.setBehaviour({ kind: 'status', status: 500, message: 'engine exploded' }, 1);
    const response = await undici.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...owner.headers, 'content-type': 'application/json', 'x-request-id': 'keepalive-fail-1' },
      body: JSON.stringify(chat('fake/slow-start', { stream: true })),
    });
    const text = await response.body.text();
    expect(text.startsWith(': keep-alive\n\n')).toBe(true);
    expect(sseData(text)).toEqual([JSON.stringify({ error: { message: 'engine exploded', type: 'server_error', param: null, code: 'engine_error' } }), '[DONE]']);
    expect(await usageRow(app, 'keepalive-fail-1')).toMatchObject({ outcome: 'error', status: 500, error_code: 'engine_error' });
  });
});

describe('errors', () => {
  it('tell a tenant that a checkpoint cannot be served without naming the backend', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'on-static', baseModel: 'fake/slow-start', steps: [1] });
    const response = await post('/v1/chat/completions', chat(`${owner.entity}/proj/on-static:step1`));
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({
      error: {
        message: `The checkpoints of ${owner.entity}/proj/on-static cannot be served: the engines serving its base model do not load adapters at run time (the server log says how to enable it).`,
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      },
    });
  });
});

describe('model cards', () => {
  it('GET /v1/models/{id} answers the listed card, for base models and checkpoint names with slashes', async () => {
    const { client, close } = openaiClient(`${url}/v1`, owner.key);
    try {
      const base = await client.models.retrieve('fake/base-model');
      expect(base).toMatchObject({ id: 'fake/base-model', object: 'model', root: 'fake/base-model', parent: null, max_model_len: 4096 });
      const id = `${owner.entity}/proj/agent:step2`;
      const trained = await client.models.retrieve(id);
      expect(trained).toMatchObject({ id, owned_by: owner.entity, root: id, parent: 'fake/base-model', max_model_len: 4096 });
    } finally {
      await close();
    }
  });

  it('GET /v1/models/{id} finds a trained model by every name chat completions take, answering the id as asked', async () => {
    const listed = (await app.inject({ method: 'GET', url: '/v1/models', headers: owner.headers })).json().data;
    const card = (id: string) => listed.find((m: { id: string }) => m.id === id);
    const forms: [string, string][] = [
      [`${owner.entity}/proj/agent:latest`, `${owner.entity}/proj/agent`],
      [`wandb-artifact:///${owner.entity}/proj/agent`, `${owner.entity}/proj/agent`],
      [`wandb-artifact:///${owner.entity}/proj/agent:step2`, `${owner.entity}/proj/agent:step2`],
      [`${owner.entity}/proj/agent:step02`, `${owner.entity}/proj/agent:step2`],
      [`${owner.entity}/proj/agent:step0`, `${owner.entity}/proj/agent`],
    ];
    for (const [asked, canonical] of forms) {
      const response = await app.inject({ method: 'GET', url: `/v1/models/${encodeURIComponent(asked)}`, headers: owner.headers });
      expect([asked, response.statusCode]).toEqual([asked, 200]);
      expect(response.json()).toEqual({ ...card(canonical), id: asked, permission: [{ ...card(canonical).permission[0], id: `modelperm-${asked}` }] });
    }
    for (const id of [`wandb-artifact:///${owner.entity}/proj/agent:step9`, `wandb-artifact:///${owner.entity}/proj/agent`]) {
      const response = await app.inject({ method: 'GET', url: `/v1/models/${encodeURIComponent(id)}`, headers: id.endsWith('step9') ? owner.headers : other.headers });
      expect([id, response.statusCode, response.json()]).toEqual([id, 404, modelNotFoundBody(id)]);
    }
  });

  it('answers 404 model_not_found for another tenant\'s model and for unknown ids', async () => {
    for (const id of [`${owner.entity}/proj/agent`, 'nobody/has/this']) {
      const response = await app.inject({ method: 'GET', url: `/v1/models/${id}`, headers: other.headers });
      expect(response.statusCode).toBe(404);
      expect(response.json()).toEqual(modelNotFoundBody(id));
    }
  });
});

describe('text completions, tokenize and detokenize', () => {
  it('serves /v1/completions through the openai SDK, with echo and prompt_logprobs for scoring, metered', async () => {
    const { client, close } = openaiClient(`${url}/v1`, owner.key);
    try {
      const { data, response } = await client.completions
        .create({ model: 'fake/base-model', prompt: 'Say', max_tokens: 3, echo: true, logprobs: 1, prompt_logprobs: 1 } as never)
        .withResponse();
      expect(data).toMatchObject({ object: 'text_completion', model: 'fake/base-model', choices: [{ text: 'SayHello from the', logprobs: { tokens: ['Hello', ' from', ' the'] } }] });
      expect((data.choices[0] as unknown as { prompt_logprobs: unknown[] }).prompt_logprobs).toHaveLength(3);
      expect(await usageRow(app, response.headers.get('x-request-id')!)).toMatchObject({ outcome: 'success', prompt_tokens: 7, completion_tokens: 3, stream: false });

      const stream = await client.completions.create({ model: 'fake/base-model', prompt: 'Say', stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
      expect(text).toBe('Hello from the');
    } finally {
      await close();
    }
  });

  it('routes a completion to a checkpoint by its name, with token ids for the trainer', async () => {
    const response = await post('/v1/completions', { model: `${owner.entity}/proj/agent:step1`, prompt: [1, 2, 3], max_tokens: 2 });
    expect(response.statusCode, response.body).toBe(200);
    const sent = engine.completionRequests().at(-1)!.body as Record<string, unknown>;
    expect(sent).toMatchObject({ model: await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'agent', step: 1 }), prompt: [1, 2, 3], logprobs: 0, return_tokens_as_token_ids: true });
    expect(response.json().model).toBe(`${owner.entity}/proj/agent:step1`);
  });

  it('tokenizes prompts and messages and detokenizes, routed by checkpoint names, not metered', async () => {
    const tokenized = await post('/tokenize', { model: `${owner.entity}/proj/agent`, prompt: 'Hi', return_token_strs: true }, owner, { 'x-request-id': 'tokenize-1' });
    expect(tokenized.statusCode, tokenized.body).toBe(200);
    expect(tokenized.json()).toEqual({ count: 2, max_model_len: 4096, tokens: [72, 105], token_strs: ['H', 'i'] });
    expect(engine.requests.at(-1)).toMatchObject({ path: '/tokenize', body: { model: await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'agent', step: 2 }) } });

    const chatTokens = await post('/tokenize', { model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi' }] });
    expect(chatTokens.json()).toMatchObject({ count: 9 });

    const detokenized = await post('/detokenize', { model: 'fake/base-model', tokens: [72, 105] });
    expect(detokenized.json()).toEqual({ prompt: 'Hi' });

    // A priority means nothing to them (vLLM ignores it there), even on a backend without priority scheduling.
    const prioritized = await post('/tokenize', { model: 'fake/base-model', prompt: 'Hi', priority: 5 });
    expect([prioritized.statusCode, prioritized.json().tokens]).toEqual([200, [72, 105]]);
    expect((await post('/detokenize', { model: 'fake/base-model', tokens: [72, 105], priority: 5 })).json()).toEqual({ prompt: 'Hi' });

    const unknown = await post('/detokenize', { model: `${owner.entity}/proj/agent`, tokens: [1] }, other);
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('model_not_found');

    await app.inject({ method: 'GET', url: '/v1/usage', headers: owner.headers });
    expect(await app.db.selectFrom('usage_records').select('id').where('request_id', '=', 'tokenize-1').execute()).toEqual([]);
  });

  it('refuses tokenize without a key, in the OpenAI envelope', async () => {
    const response = await app.inject({ method: 'POST', url: '/tokenize', payload: { model: 'fake/base-model', prompt: 'Hi' } });
    expect(response.statusCode).toBe(401);
    expect(response.json().error.code).toBe('invalid_api_key');
  });
});

describe('the openai SDK', () => {
  it('reads a 422 for a lax scalar pydantic would refuse as UnprocessableEntityError', async () => {
    const { client, close } = openaiClient(`${url}/v1`, owner.key);
    try {
      const error = await client.chat.completions.create({ model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi' }], n: 'two' as never }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(OpenAI.UnprocessableEntityError);
      expect(error).toMatchObject({ status: 422, param: 'n', code: 'float_type' });
    } finally {
      await close();
    }
  });
});
