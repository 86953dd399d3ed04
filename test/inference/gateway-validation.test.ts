import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { ChatCompletionRequest } from '../../src/inference/schemas.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, chat, createGatewayApp } from './gateway-helpers.js';

let engine: FakeEngine;
let priorityEngine: FakeEngine;
let app: App;
let user: TestUser;

beforeAll(async () => {
  engine = await startFakeEngine();
  priorityEngine = await startFakeEngine({ models: ['fake/priority-model'] });
  app = await createGatewayApp([
    backendEntry('plain', [engine.url]),
    backendEntry('scheduled', [priorityEngine.url], { models: ['fake/priority-model'], priority_scheduling: true }),
  ]);
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
  await Promise.all([engine.close(), priorityEngine.close()]);
});

const post = (body: unknown) =>
  app.inject({ method: 'POST', url: '/v1/chat/completions', headers: user.headers, payload: body as object });

/** The 422 of a rule broken at `loc` with pydantic's value_error form. */
const valueError = (loc: (string | number)[], input: unknown, error: string) => ({
  type: 'value_error',
  loc: ['body', ...loc],
  msg: `Value error, ${error}`,
  input,
  ctx: { error },
});

const f = { type: 'function', function: { name: 'f' } };

const RULES: [name: string, overrides: Record<string, unknown>, detail: Record<string, unknown>][] = [
  ['seed beyond int64', { seed: 1e19 }, { type: 'less_than_equal', loc: ['body', 'seed'], msg: 'Input should be less than or equal to 9223372036854775807', input: '10000000000000000000' }],
  ['fractional seed', { seed: 1.5 }, { type: 'int_from_float', loc: ['body', 'seed'], msg: 'Input should be a valid integer, got a number with a fractional part', input: 1.5 }],
  ['truncate_prompt_tokens below -1', { truncate_prompt_tokens: -2 }, { type: 'greater_than_equal', loc: ['body', 'truncate_prompt_tokens'], msg: 'Input should be greater than or equal to -1', input: -2, ctx: { ge: -1 } }],
  ['top_logprobs without logprobs', { top_logprobs: 3 }, valueError(['top_logprobs'], 3, 'when using `top_logprobs`, `logprobs` must be set to true')],
  ['stream_options without stream', { stream_options: { include_usage: true } }, valueError(['stream_options'], { include_usage: true }, 'Stream options can only be defined when `stream=True`')],
  ['prompt_logprobs while streaming', { prompt_logprobs: 1, stream: true }, valueError(['prompt_logprobs'], 1, '`prompt_logprobs` are not available when `stream=True`')],
  ['json_schema response_format without json_schema', { response_format: { type: 'json_schema' } }, { type: 'missing', loc: ['body', 'response_format', 'json_schema'], msg: 'Field required', input: { type: 'json_schema' } }],
  ['two kinds of structured output', { structured_outputs: { regex: 'a', choice: ['b'] } }, valueError(['structured_outputs'], { regex: 'a', choice: ['b'] }, 'You can only use one kind of constraints for structured outputs, got regex, choice')],
  ['structured output with a named tool_choice', { structured_outputs: { regex: 'a' }, tools: [f], tool_choice: f }, valueError(['structured_outputs'], { regex: 'a' }, 'You can only either use constraints for structured outputs or a named tool_choice, not both')],
  ['empty tools', { tools: [] }, { type: 'too_short', loc: ['body', 'tools'], msg: 'List should have at least 1 item after validation, not 0', input: [], ctx: { field_type: 'List', min_length: 1, actual_length: 0 } }],
  ['tool_choice without tools', { tool_choice: 'auto' }, valueError(['tool_choice'], 'auto', 'When using `tool_choice`, `tools` must be set')],
  ['a named tool_choice that is not among tools', { tools: [f], tool_choice: { type: 'function', function: { name: 'g' } } }, valueError(['tool_choice', 'function', 'name'], 'g', 'The tool specified in `tool_choice` does not match any of the specified `tools`')],
  ['an unknown tool_choice', { tools: [f], tool_choice: 'sometimes' }, { type: 'literal_error', loc: ['body', 'tool_choice'], msg: "Input should be 'none', 'auto' or 'required'", input: 'sometimes', ctx: { expected: "'none', 'auto' or 'required'" } }],
  ['n > 1 under greedy sampling', { n: 2, temperature: 0 }, valueError(['n'], 2, 'n must be 1 when using greedy sampling (temperature 0)')],
  ['temperature above 2', { temperature: 2.5 }, { type: 'less_than_equal', loc: ['body', 'temperature'], msg: 'Input should be less than or equal to 2', input: 2.5, ctx: { le: 2 } }],
  ['top_p of 0', { top_p: 0 }, { type: 'greater_than', loc: ['body', 'top_p'], msg: 'Input should be greater than 0', input: 0, ctx: { gt: 0 } }],
  ['top_k below -1', { top_k: -2 }, { type: 'greater_than_equal', loc: ['body', 'top_k'], msg: 'Input should be greater than or equal to -1', input: -2, ctx: { ge: -1 } }],
  ['min_p above 1', { min_p: 1.5 }, { type: 'less_than_equal', loc: ['body', 'min_p'], msg: 'Input should be less than or equal to 1', input: 1.5, ctx: { le: 1 } }],
  ['frequency_penalty above 2', { frequency_penalty: 3 }, { type: 'less_than_equal', loc: ['body', 'frequency_penalty'], msg: 'Input should be less than or equal to 2', input: 3, ctx: { le: 2 } }],
  ['presence_penalty below -2', { presence_penalty: -2.5 }, { type: 'greater_than_equal', loc: ['body', 'presence_penalty'], msg: 'Input should be greater than or equal to -2', input: -2.5, ctx: { ge: -2 } }],
  ['repetition_penalty of 0', { repetition_penalty: 0 }, { type: 'greater_than', loc: ['body', 'repetition_penalty'], msg: 'Input should be greater than 0', input: 0, ctx: { gt: 0 } }],
  ['min_tokens above max_tokens', { min_tokens: 10, max_tokens: 5 }, valueError(['min_tokens'], 10, 'min_tokens must be less than or equal to max_tokens (5)')],
  [
    'continue_final_message while add_generation_prompt defaults to true',
    { continue_final_message: true },
    valueError(['continue_final_message'], true, 'Cannot set both `continue_final_message` and `add_generation_prompt` to true; send `add_generation_prompt: false` to continue the final message'),
  ],
  [
    'continue_final_message with add_generation_prompt true',
    { continue_final_message: true, add_generation_prompt: true },
    valueError(['continue_final_message'], true, 'Cannot set both `continue_final_message` and `add_generation_prompt` to true; send `add_generation_prompt: false` to continue the final message'),
  ],
];

describe('chat completion validation (422 detail form plus the OpenAI envelope)', () => {
  it.each(RULES)('rejects %s', async (_name, overrides, detail) => {
    const before = engine.chatRequests().length;
    const response = await post(chat('fake/base-model', overrides));
    expect(response.statusCode).toBe(422);
    const body = response.json();
    expect(body.detail).toEqual([detail]);
    const loc = detail.loc as string[];
    expect(body.error).toEqual({
      message: `${loc.join('.')}: ${detail.msg as string}`,
      type: 'invalid_request_error',
      param: loc.slice(1).join('.'),
      code: detail.type,
    });
    expect(engine.chatRequests().length).toBe(before);
  });

  it('rejects a non-zero priority when the model\'s backend does not schedule by priority', async () => {
    const error = 'priority 5 needs priority scheduling, which the backend serving fake/base-model does not use; send priority 0 or omit it';
    const response = await post(chat('fake/base-model', { priority: 5 }));
    expect(response.statusCode).toBe(422);
    expect(response.json().detail).toEqual([
      { type: 'value_error', loc: ['body', 'priority'], msg: `Value error, ${error}`, input: 5, ctx: { error: 'priority scheduling is not enabled' } },
    ]);
  });

  it('forwards a non-zero priority to a backend that schedules by priority, and priority 0 to any', async () => {
    expect((await post(chat('fake/priority-model', { priority: -3 }))).statusCode).toBe(200);
    expect(priorityEngine.chatRequests().at(-1)!.body).toMatchObject({ priority: -3 });
    expect((await post(chat('fake/base-model', { priority: 0 }))).statusCode).toBe(200);
  });

  it('takes max_tokens 0 on a completion only with echo (the prompt scored, nothing generated), as vLLM does', async () => {
    const complete = (body: Record<string, unknown>) =>
      app.inject({ method: 'POST', url: '/v1/completions', headers: user.headers, payload: { model: 'fake/base-model', prompt: 'the sky is', ...body } });
    const scored = await complete({ max_tokens: 0, echo: true, logprobs: 0 });
    expect(scored.statusCode, scored.body).toBe(200);
    expect(engine.completionRequests().at(-1)!.body).toMatchObject({ max_tokens: 0, echo: true, logprobs: 0 });
    const refused = await complete({ max_tokens: 0 });
    expect([refused.statusCode, refused.json().detail]).toEqual([
      422,
      [valueError(['max_tokens'], 0, 'max_tokens must be at least 1, or 0 with `echo` (the prompt scored, nothing generated)')],
    ]);
    const chatZero = await post(chat('fake/base-model', { max_tokens: 0, echo: true }));
    expect([chatZero.statusCode, chatZero.json().detail[0].loc]).toEqual([422, ['body', 'max_tokens']]);
  });

  it('tokenizes the messages when /tokenize gets both a prompt and messages, as vLLM does, and needs one of them', async () => {
    const tokenize = (body: Record<string, unknown>) => app.inject({ method: 'POST', url: '/tokenize', headers: user.headers, payload: { model: 'fake/base-model', ...body } });
    const messages = [{ role: 'user', content: 'Hi' }];
    const both = await tokenize({ prompt: 'Hi', messages });
    expect(both.statusCode, both.body).toBe(200);
    expect(engine.requests.at(-1)).toMatchObject({ path: '/tokenize', body: { prompt: 'Hi', messages } });
    const neither = await tokenize({});
    // Nothing was sent at `prompt`, so the detail has no input, as for the completion below.
    const absent = (error: string) => ({ type: 'value_error', loc: ['body', 'prompt'], msg: `Value error, ${error}`, ctx: { error } });
    expect([neither.statusCode, neither.json().detail]).toEqual([422, [absent('send `prompt` or `messages`')]]);
    const completion = await app.inject({ method: 'POST', url: '/v1/completions', headers: user.headers, payload: { model: 'fake/base-model' } });
    expect([completion.statusCode, completion.json().detail]).toEqual([422, [absent('exactly one of `prompt` or `prompt_embeds` must be given')]]);
  });

  it('accepts prefill with add_generation_prompt sent as false', async () => {
    const response = await post(chat('fake/base-model', { continue_final_message: true, add_generation_prompt: false }));
    expect(response.statusCode).toBe(200);
    expect(engine.chatRequests().at(-1)!.body).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
  });

  it('requires a model', async () => {
    const response = await post({ messages: [{ role: 'user', content: 'Hi' }] });
    expect(response.statusCode).toBe(422);
    expect(response.json().detail).toEqual([
      { type: 'missing', loc: ['body', 'model'], msg: 'Field required', input: { messages: [{ role: 'user', content: 'Hi' }] } },
    ]);
  });

  it('forwards unknown fields untouched, engine_xargs as vllm_xargs, and the deprecated max_tokens', async () => {
    const response = await post(
      chat('fake/base-model', { max_tokens: 12, some_future_field: { nested: [1, 2] }, engine_xargs: { kv_hint: 'a', ids: [1, 2] }, cache_salt: 'salt' }),
    );
    expect(response.statusCode).toBe(200);
    const forwarded = engine.chatRequests().at(-1)!.body as Record<string, unknown>;
    expect(forwarded).toEqual({
      model: 'fake/base-model',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 12,
      some_future_field: { nested: [1, 2] },
      vllm_xargs: { kv_hint: 'a', ids: [1, 2] },
      cache_salt: 'salt',
    });
  });

  it('forwards a request_id from the body upstream and returns it', async () => {
    const response = await post(chat('fake/base-model', { request_id: 'body-req-7' }));
    expect(response.statusCode).toBe(200);
    expect(response.headers['x-request-id']).toBe('body-req-7');
    expect(response.json().id).toBe('chatcmpl-body-req-7');
    const sent = engine.chatRequests().at(-1)!;
    expect(sent.headers['x-request-id']).toBe('body-req-7');
    expect(sent.body).toMatchObject({ request_id: 'body-req-7' });
  });

  it('answers invalid JSON and unsupported content types in the inference forms', async () => {
    const invalid = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...user.headers, 'content-type': 'application/json' }, payload: '{"model":' });
    expect(invalid.statusCode).toBe(422);
    expect(invalid.json().detail[0]).toMatchObject({ type: 'json_invalid', loc: ['body', 9] });
    const text = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...user.headers, 'content-type': 'text/plain' }, payload: 'hi' });
    expect(text.statusCode).toBe(415);
    expect(text.json().error).toMatchObject({ code: 'unsupported_media_type', type: 'invalid_request_error' });
  });

  it('refuses an integer of more than 4,300 digits as Python\'s json does, sending nothing', async () => {
    const sent = engine.chatRequests().length;
    const payload = `{"model":"fake/base-model","messages":[{"role":"user","content":"hi"}],"seed":${'9'.repeat(100_000)}}`;
    const response = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...user.headers, 'content-type': 'application/json' }, payload });
    expect([response.statusCode, response.json()]).toEqual([
      422,
      {
        detail: [
          { type: 'json_invalid', loc: ['body', 78], msg: 'JSON decode error', input: {}, ctx: { error: 'Exceeds the limit (4300 digits) for integer string conversion: value has 100000 digits' } },
        ],
        // loc's 78 is where parsing stopped, not a field: the envelope names no param.
        error: { code: 'json_invalid', message: 'body.78: JSON decode error', param: null, type: 'invalid_request_error' },
      },
    ]);
    expect(engine.chatRequests().length).toBe(sent);
  });

  it('treats /v1/chat/completions/ as the same operation', async () => {
    const response = await app.inject({ method: 'POST', url: '/v1/chat/completions/', headers: user.headers, payload: chat('fake/base-model') });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ object: 'chat.completion', model: 'fake/base-model' });
  });

  it('rejects every generated invalid body with nothing written and nothing sent upstream', async () => {
    const before = engine.chatRequests().length;
    await app.inject({ method: 'GET', url: '/v1/usage', headers: user.headers }); // flushes buffered usage first
    await expectBadInputRejected(app, {
      request: { method: 'POST', url: '/v1/chat/completions', headers: user.headers },
      schema: ChatCompletionRequest,
      valid: chat('fake/base-model'),
      family: 'inference',
    });
    expect(engine.chatRequests().length).toBe(before);
  });
});

describe('without a backends file', () => {
  let bare: App;
  let someone: TestUser;
  beforeAll(async () => {
    bare = await createTestApp();
    someone = await createUserWithKey(bare);
  });
  afterAll(async () => {
    await bare.close();
  });

  it('still serves, and chat answers 404 model_not_found saying how to configure a backend', async () => {
    const response = await bare.inject({ method: 'POST', url: '/v1/chat/completions', headers: someone.headers, payload: chat('fake/base-model') });
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({
      error: {
        message:
          'No inference backend is configured, so the model `fake/base-model` cannot be served. Set BACKENDS_FILE to a JSON or YAML file listing your engines (see docs/inference.md).',
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      },
    });
  });

  it('lists no base models', async () => {
    const response = await bare.inject({ method: 'GET', url: '/v1/models', headers: someone.headers });
    expect(response.json()).toEqual({ object: 'list', data: [] });
  });
});
