import { describe, expect, it } from 'vitest';
import { zodIssuesToDetail } from '../../src/http/validation.js';
import { ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ModelList } from '../../src/inference/schemas.js';

const valid = (overrides: Record<string, unknown> = {}) => ({
  model: 'fake/base-model',
  messages: [{ role: 'user', content: 'Hi' }],
  ...overrides,
});

/** The FastAPI-form locations of every problem with a request body. */
function locs(overrides: Record<string, unknown>): string[] {
  const body = valid(overrides);
  const result = ChatCompletionRequest.safeParse(body);
  if (result.success) return [];
  return zodIssuesToDetail(result.error.issues, 'body', body).map((d) => d.loc.join('.'));
}

describe('chat completion request schema', () => {
  it('accepts a minimal request', () => {
    expect(locs({})).toEqual([]);
  });

  it('keeps unknown fields so they can be forwarded', () => {
    const parsed = ChatCompletionRequest.parse(valid({ vllm_xargs: { a: 1 }, some_future_field: [1, 2] }));
    expect(parsed).toMatchObject({ vllm_xargs: { a: 1 }, some_future_field: [1, 2] });
  });

  it('keeps unknown fields inside messages and tools', () => {
    const parsed = ChatCompletionRequest.parse(
      valid({
        messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'x' }], reasoning: 'r' }],
        tools: [{ type: 'function', function: { name: 'f', defer_loading: true } }],
      }),
    );
    expect(parsed.messages[0]).toMatchObject({ tool_calls: [{ id: 'x' }], reasoning: 'r' });
    expect(parsed.tools?.[0].function).toMatchObject({ defer_loading: true });
  });

  it('requires messages', () => {
    const result = ChatCompletionRequest.safeParse({ model: 'm' });
    expect(result.success).toBe(false);
    expect(zodIssuesToDetail(result.error!.issues, 'body', { model: 'm' })).toMatchObject([{ loc: ['body', 'messages'], type: 'missing' }]);
  });

  it('accepts the deprecated max_tokens', () => {
    expect(ChatCompletionRequest.parse(valid({ max_tokens: 16 })).max_tokens).toBe(16);
  });

  it('accepts every documented field at once', () => {
    expect(
      locs({
        frequency_penalty: 0.5, logit_bias: { '50256': -100 }, logprobs: true, top_logprobs: 5, max_completion_tokens: 64,
        n: 2, presence_penalty: -1, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {}, strict: true } },
        seed: 42, stop: ['\n'], stream: true, stream_options: { include_usage: true, continuous_usage_stats: false },
        temperature: 0.7, top_p: 0.9, tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
        tool_choice: { type: 'function', function: { name: 'f' } }, reasoning_effort: 'low', include_reasoning: false,
        parallel_tool_calls: true, user: 'u', use_beam_search: false, top_k: -1, min_p: 0.1, repetition_penalty: 1.1,
        length_penalty: 1, stop_token_ids: [2], include_stop_str_in_output: false, ignore_eos: false, min_tokens: 1,
        skip_special_tokens: true, spaces_between_special_tokens: true, truncate_prompt_tokens: -1, prompt_logprobs: 0,
        allowed_token_ids: [1, 2], bad_words: ['x'], echo: false, add_generation_prompt: false, continue_final_message: true,
        add_special_tokens: false, documents: [{ title: 't', text: 'x' }], chat_template: '{{x}}',
        chat_template_kwargs: { enable_thinking: false }, mm_processor_kwargs: {}, structured_outputs: null, priority: -5,
        request_id: 'r-1', logits_processors: ['a.b', { qualname: 'c.d', args: [1], kwargs: {} }],
        return_tokens_as_token_ids: true, return_token_ids: true, cache_salt: 'salt', kv_transfer_params: {},
        engine_xargs: { a: 'b', c: [1, 'd'] },
      }),
    ).toEqual([]);
  });

  it('rejects a seed written as a float beyond int64 (exact integer literals are checked by the body parser)', () => {
    expect(locs({ seed: 1e19 })).toEqual(['body.seed']);
  });

  it('rejects a fractional seed as not an integer', () => {
    const body = valid({ seed: 1.5 });
    const result = ChatCompletionRequest.safeParse(body);
    expect(zodIssuesToDetail(result.error!.issues, 'body', body)).toMatchObject([{ loc: ['body', 'seed'], type: 'int_from_float' }]);
  });

  it('accepts truncate_prompt_tokens of -1 and rejects -2', () => {
    expect(locs({ truncate_prompt_tokens: -1 })).toEqual([]);
    expect(locs({ truncate_prompt_tokens: -2 })).toEqual(['body.truncate_prompt_tokens']);
  });

  it('rejects top_logprobs without logprobs', () => {
    expect(locs({ top_logprobs: 3 })).toEqual(['body.top_logprobs']);
    expect(locs({ top_logprobs: -1, logprobs: false })).toEqual(['body.top_logprobs']);
  });

  it('accepts top_logprobs of 0 without logprobs', () => {
    expect(locs({ top_logprobs: 0 })).toEqual([]);
  });

  it('rejects top_logprobs below -1', () => {
    expect(locs({ top_logprobs: -2, logprobs: true })).toEqual(['body.top_logprobs']);
  });

  it('rejects prompt_logprobs while streaming', () => {
    expect(locs({ prompt_logprobs: 1, stream: true })).toEqual(['body.prompt_logprobs']);
  });

  it('rejects stream_options without stream', () => {
    expect(locs({ stream_options: { include_usage: true } })).toEqual(['body.stream_options']);
    expect(locs({ stream_options: { include_usage: true }, stream: false })).toEqual(['body.stream_options']);
  });

  it('accepts an empty stream_options without stream, as vLLM does', () => {
    expect(locs({ stream_options: {} })).toEqual([]);
  });

  it('rejects a json_schema response_format without json_schema', () => {
    expect(locs({ response_format: { type: 'json_schema' } })).toEqual(['body.response_format.json_schema']);
  });

  it('rejects an unknown response_format type', () => {
    expect(locs({ response_format: { type: 'xml' } })).toEqual(['body.response_format.type']);
  });

  it('accepts text, json_object and structural_tag response formats', () => {
    for (const type of ['text', 'json_object', 'structural_tag']) expect(locs({ response_format: { type } })).toEqual([]);
  });

  it('rejects two kinds of structured output', () => {
    expect(locs({ structured_outputs: { json: {}, regex: 'a+' } })).toEqual(['body.structured_outputs']);
  });

  it('accepts one kind of structured output with its options', () => {
    expect(locs({ structured_outputs: { choice: ['a', 'b'], disable_any_whitespace: true, json_object: false } })).toEqual([]);
  });

  it('rejects structured outputs together with a named tool_choice', () => {
    expect(
      locs({
        structured_outputs: { regex: 'a' },
        tools: [{ type: 'function', function: { name: 'f' } }],
        tool_choice: { type: 'function', function: { name: 'f' } },
      }),
    ).toEqual(['body.structured_outputs']);
  });

  it('rejects an empty tools array', () => {
    expect(locs({ tools: [] })).toEqual(['body.tools']);
  });

  it('accepts tool_choice none, auto and required with tools', () => {
    for (const choice of ['none', 'auto', 'required']) {
      expect(locs({ tool_choice: choice, tools: [{ type: 'function', function: { name: 'f' } }] })).toEqual([]);
    }
  });

  it('accepts tool_choice none without tools', () => {
    expect(locs({ tool_choice: 'none' })).toEqual([]);
  });

  it('rejects tool_choice auto without tools', () => {
    expect(locs({ tool_choice: 'auto' })).toEqual(['body.tool_choice']);
  });

  it('rejects an unknown tool_choice string', () => {
    expect(locs({ tool_choice: 'any', tools: [{ type: 'function', function: { name: 'f' } }] })).toEqual(['body.tool_choice']);
  });

  it('rejects a named tool_choice that names no tool', () => {
    expect(
      locs({ tool_choice: { type: 'function', function: { name: 'g' } }, tools: [{ type: 'function', function: { name: 'f' } }] }),
    ).toEqual(['body.tool_choice.function.name']);
  });

  it('rejects a named tool_choice without a name', () => {
    expect(locs({ tool_choice: { type: 'function', function: {} }, tools: [{ type: 'function', function: { name: 'f' } }] })).toEqual([
      'body.tool_choice',
    ]);
  });

  it('rejects n above 1 under greedy sampling', () => {
    expect(locs({ n: 2, temperature: 0 })).toEqual(['body.n']);
  });

  it('accepts n above 1 with beam search at temperature 0', () => {
    expect(locs({ n: 4, temperature: 0, use_beam_search: true })).toEqual([]);
  });

  it('rejects n of 0', () => {
    expect(locs({ n: 0 })).toEqual(['body.n']);
  });

  it.each([
    ['temperature', -0.1], ['temperature', 2.1], ['top_p', 0], ['top_p', 1.01], ['top_k', -2], ['top_k', 1.5],
    ['min_p', -0.1], ['min_p', 1.1], ['presence_penalty', 2.5], ['frequency_penalty', -2.5], ['repetition_penalty', 0],
    ['max_tokens', 0], ['max_completion_tokens', 0], ['min_tokens', -1],
  ])('rejects %s = %s as out of range', (field, value) => {
    expect(locs({ [field]: value })).toEqual([`body.${field}`]);
  });

  it.each([['temperature', 0], ['temperature', 2], ['top_p', 1], ['top_k', -1], ['min_p', 0], ['presence_penalty', -2], ['repetition_penalty', 0.01]])(
    'accepts %s = %s at the edge of its range',
    (field, value) => {
      expect(locs({ [field]: value })).toEqual([]);
    },
  );

  it('rejects min_tokens above max_tokens', () => {
    expect(locs({ min_tokens: 10, max_tokens: 5 })).toEqual(['body.min_tokens']);
  });

  it('rejects continue_final_message with the default add_generation_prompt', () => {
    expect(locs({ continue_final_message: true })).toEqual(['body.continue_final_message']);
    expect(locs({ continue_final_message: true, add_generation_prompt: true })).toEqual(['body.continue_final_message']);
  });

  it('accepts continue_final_message with add_generation_prompt false', () => {
    expect(locs({ continue_final_message: true, add_generation_prompt: false })).toEqual([]);
  });

  it('rejects priority beyond int64', () => {
    expect(locs({ priority: -1e19 })).toEqual(['body.priority']);
  });

  it('rejects an empty stop string', () => {
    expect(locs({ stop: [''] })).toEqual(['body.stop.0']);
  });

  it('rejects engine_xargs values that are not strings, numbers or lists of them', () => {
    expect(locs({ engine_xargs: { a: { nested: true } } })).toEqual(['body.engine_xargs.a']);
  });

  it('rejects a reasoning_effort outside the known levels', () => {
    expect(locs({ reasoning_effort: 'extreme' })).toEqual(['body.reasoning_effort']);
  });
});

describe('response schemas', () => {
  it('accept a vLLM completion with engine extras', () => {
    const completion = {
      id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi', reasoning_content: null }, logprobs: null, finish_reason: 'stop', stop_reason: null, token_ids: [1] }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, prompt_tokens_details: null },
      prompt_token_ids: [5], kv_transfer_params: null, extra_engine_field: 1,
    };
    expect(ChatCompletion.parse(completion)).toMatchObject({ extra_engine_field: 1 });
  });

  it('accept a streamed chunk and a model list', () => {
    expect(ChatCompletionChunk.safeParse({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] }).success).toBe(true);
    expect(ModelList.safeParse({ object: 'list', data: [{ id: 'm', object: 'model', created: 1, owned_by: 'trainyard', root: 'm', parent: null, max_model_len: 4096, permission: [] }] }).success).toBe(true);
  });
});
