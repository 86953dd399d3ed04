import { z } from 'zod';

/**
 * Chat completion request and response schemas: every field of the seed's request table, with the
 * ranges and cross-field rules vLLM enforces (reference/inference-api.md §1.3). Objects are loose so
 * that fields this gateway does not know reach the engine untouched; vLLM accepts and ignores extras.
 */

const INT64_MIN = -9223372036854775808;
const INT64_MAX = 9223372036854775807;

/**
 * An integer in int64 range. zod's `.int()` stops at 2^53, but the seed allows the full int64 range
 * for `seed`, `priority` and `truncate_prompt_tokens`; JSON numbers above 2^53 are already rounded.
 */
const int64 = (min = INT64_MIN) =>
  z
    .number()
    .min(min)
    .max(INT64_MAX)
    .superRefine((value, ctx) => {
      if (!Number.isInteger(value)) ctx.addIssue({ code: 'invalid_type', expected: 'int', input: value });
    });

const int = () => z.number().int();
/** A request id that can travel as an HTTP header value: 1 to 256 printable ASCII characters, no spaces. */
export const REQUEST_ID = /^[\x21-\x7e]{1,256}$/;
const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();
const record = z.record(z.string(), z.unknown());

export const ChatMessage = z
  .object({
    role: z.string(),
    // Strings, content-part arrays (text, images, ...), or null on assistant turns that only call tools.
    content: z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]).optional(),
    name: z.string().optional(),
  })
  .loose();
export type ChatMessage = z.infer<typeof ChatMessage>;

const JsonSchemaFormat = z
  .object({
    name: z.string(),
    description: z.string().optional(),
    schema: record.optional(),
    strict: z.boolean().nullable().optional(),
  })
  .loose();

export const ResponseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }).loose(),
  z.object({ type: z.literal('json_object') }).loose(),
  z.object({ type: z.literal('json_schema'), json_schema: JsonSchemaFormat }).loose(),
  // Both the current `{format}` and the legacy `{structures, triggers}` forms; xgrammar checks them.
  z.object({ type: z.literal('structural_tag') }).loose(),
]);

export const Tool = z
  .object({
    type: z.literal('function'),
    function: z
      .object({
        name: z.string().min(1),
        description: z.string().optional(),
        parameters: record.optional(),
        strict: z.boolean().nullable().optional(),
      })
      .loose(),
  })
  .loose();

export const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1) }).loose() }).loose(),
]);

export const StructuredOutputs = z
  .object({
    json: z.union([z.string(), record]).nullable().optional(),
    regex: z.string().nullable().optional(),
    choice: z.array(z.string()).nullable().optional(),
    grammar: z.string().nullable().optional(),
    json_object: z.boolean().nullable().optional(),
    disable_fallback: z.boolean().optional(),
    disable_any_whitespace: z.boolean().optional(),
    disable_additional_properties: z.boolean().optional(),
    whitespace_pattern: z.string().nullable().optional(),
    structural_tag: z.string().nullable().optional(),
    _backend: z.string().nullable().optional(),
    _backend_was_auto: z.boolean().optional(),
  })
  .loose();

const LogitsProcessor = z.union([
  z.string(),
  z.object({ qualname: z.string(), args: z.array(z.unknown()).optional(), kwargs: record.optional() }).loose(),
]);

const XargValue = z.union([z.string(), z.number()]);

const ChatCompletionRequestShape = z
  .object({
    messages: z.array(ChatMessage).min(1),
    model: nullable(z.string()),
    frequency_penalty: nullable(z.number().min(-2).max(2)),
    logit_bias: nullable(z.record(z.string(), z.number())),
    logprobs: nullable(z.boolean()),
    // -1 asks for the whole vocabulary (vLLM); other negatives are rejected below.
    top_logprobs: nullable(int().min(-1)),
    /** Deprecated by the API in favour of max_completion_tokens; still honoured. */
    max_tokens: nullable(int().min(1)),
    max_completion_tokens: nullable(int().min(1)),
    n: nullable(int().min(1)),
    presence_penalty: nullable(z.number().min(-2).max(2)),
    response_format: nullable(ResponseFormat),
    seed: nullable(int64()),
    stop: nullable(z.union([z.string().min(1), z.array(z.string().min(1))])),
    stream: nullable(z.boolean()),
    stream_options: nullable(
      z
        .object({ include_usage: nullable(z.boolean()), continuous_usage_stats: nullable(z.boolean()) })
        .loose(),
    ),
    temperature: nullable(z.number().min(0).max(2)),
    top_p: nullable(z.number().gt(0).max(1)),
    tools: nullable(z.array(Tool).min(1)),
    tool_choice: nullable(ToolChoice),
    // The seed lists low/medium/high; current engines and the openai SDK also send the others.
    reasoning_effort: nullable(z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'])),
    include_reasoning: z.boolean().optional(),
    parallel_tool_calls: nullable(z.boolean()),
    user: nullable(z.string()),
    use_beam_search: z.boolean().optional(),
    top_k: nullable(int().min(-1)),
    min_p: nullable(z.number().min(0).max(1)),
    repetition_penalty: nullable(z.number().gt(0)),
    length_penalty: z.number().optional(),
    stop_token_ids: nullable(z.array(int())),
    include_stop_str_in_output: z.boolean().optional(),
    ignore_eos: z.boolean().optional(),
    min_tokens: int().min(0).optional(),
    skip_special_tokens: z.boolean().optional(),
    spaces_between_special_tokens: z.boolean().optional(),
    truncate_prompt_tokens: nullable(int64(-1)),
    prompt_logprobs: nullable(int().min(-1)),
    allowed_token_ids: nullable(z.array(int())),
    bad_words: z.array(z.string().min(1)).optional(),
    echo: z.boolean().optional(),
    add_generation_prompt: z.boolean().optional(),
    continue_final_message: z.boolean().optional(),
    add_special_tokens: z.boolean().optional(),
    documents: nullable(z.array(z.record(z.string(), z.string()))),
    chat_template: nullable(z.string()),
    chat_template_kwargs: nullable(record),
    mm_processor_kwargs: nullable(record),
    structured_outputs: nullable(StructuredOutputs),
    priority: int64().optional(),
    // Sent to the engine as the x-request-id header and returned in ours: printable ASCII, no spaces.
    request_id: z.string().regex(REQUEST_ID).optional(),
    logits_processors: nullable(z.array(LogitsProcessor)),
    return_tokens_as_token_ids: nullable(z.boolean()),
    return_token_ids: nullable(z.boolean()),
    cache_salt: nullable(z.string().min(1)),
    kv_transfer_params: nullable(record),
    /** Forwarded as the engine's extension field (`vllm_xargs` for vLLM). */
    engine_xargs: nullable(z.record(z.string(), z.union([XargValue, z.array(XargValue)]))),
  })
  .loose();

type RequestShape = z.infer<typeof ChatCompletionRequestShape>;

/** Below this temperature vLLM samples greedily (sampling_params.py `_SAMPLING_EPS`). */
const GREEDY_EPSILON = 1e-5;

const STRUCTURED_KINDS = ['json', 'regex', 'choice', 'grammar', 'json_object', 'structural_tag'] as const;

/** The engine's cross-field rules, each reported at the field a client has to change. */
function crossFieldRules(body: RequestShape, ctx: z.RefinementCtx): void {
  const fail = (path: (string | number)[], message: string, input: unknown) =>
    ctx.addIssue({ code: 'custom', path, message, input });

  if (body.top_logprobs != null && body.top_logprobs !== 0 && body.logprobs !== true) {
    fail(['top_logprobs'], 'when using `top_logprobs`, `logprobs` must be set to true', body.top_logprobs);
  }
  if (body.prompt_logprobs != null && body.prompt_logprobs !== 0 && body.stream === true) {
    fail(['prompt_logprobs'], '`prompt_logprobs` are not available when `stream=True`', body.prompt_logprobs);
  }
  // An empty object is falsy in vLLM's check, so `stream_options: {}` passes without `stream`.
  if (body.stream_options && Object.keys(body.stream_options).length > 0 && body.stream !== true) {
    fail(['stream_options'], 'Stream options can only be defined when `stream=True`', body.stream_options);
  }

  const structured = body.structured_outputs;
  if (structured) {
    const kinds = STRUCTURED_KINDS.filter((kind) => (kind === 'json_object' ? structured[kind] === true : structured[kind] != null));
    if (kinds.length > 1) {
      fail(['structured_outputs'], `You can only use one kind of constraints for structured outputs, got ${kinds.join(', ')}`, structured);
    }
    if (kinds.length > 0 && typeof body.tool_choice === 'object' && body.tool_choice !== null) {
      fail(['structured_outputs'], 'You can only either use constraints for structured outputs or a named tool_choice, not both', structured);
    }
  }

  const choice = body.tool_choice;
  if (choice != null && choice !== 'none') {
    if (!body.tools) {
      fail(['tool_choice'], 'When using `tool_choice`, `tools` must be set', choice);
    } else if (typeof choice === 'object' && !body.tools.some((tool) => tool.function.name === choice.function.name)) {
      fail(['tool_choice', 'function', 'name'], 'The tool specified in `tool_choice` does not match any of the specified `tools`', choice.function.name);
    }
  }

  // With beam search `n` is the beam width, so the greedy rule does not apply.
  if (body.n != null && body.n > 1 && body.temperature != null && body.temperature < GREEDY_EPSILON && body.use_beam_search !== true) {
    fail(['n'], 'n must be 1 when using greedy sampling (temperature 0)', body.n);
  }

  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  if (body.min_tokens != null && maxTokens != null && body.min_tokens > maxTokens) {
    fail(['min_tokens'], `min_tokens must be less than or equal to max_tokens (${maxTokens})`, body.min_tokens);
  }

  // add_generation_prompt defaults to true, so prefilling needs it sent as false.
  if (body.continue_final_message === true && body.add_generation_prompt !== false) {
    fail(['continue_final_message'], 'Cannot set both `continue_final_message` and `add_generation_prompt` to true; send `add_generation_prompt: false` to continue the final message', true);
  }
}

export const ChatCompletionRequest = ChatCompletionRequestShape.superRefine(crossFieldRules);
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

// ---- Responses (documented for OpenAPI; engine extras pass through, so these stay loose) ----

const Usage = z
  .object({
    prompt_tokens: int(),
    completion_tokens: int(),
    total_tokens: int(),
    prompt_tokens_details: z.object({ cached_tokens: int().nullable().optional() }).loose().nullable().optional(),
  })
  .loose();
export type Usage = z.infer<typeof Usage>;

const TopLogprob = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(int()).nullable().optional() }).loose();
const Logprobs = z
  .object({
    content: z.array(TopLogprob.extend({ top_logprobs: z.array(TopLogprob).optional() })).nullable().optional(),
  })
  .loose();

const ToolCall = z
  .object({
    id: z.string(),
    type: z.literal('function'),
    function: z.object({ name: z.string(), arguments: z.string() }).loose(),
  })
  .loose();

const ResponseMessage = z
  .object({
    role: z.string(),
    content: z.string().nullable().optional(),
    refusal: z.string().nullable().optional(),
    tool_calls: z.array(ToolCall).optional(),
    function_call: z.object({ name: z.string(), arguments: z.string() }).loose().nullable().optional(),
    reasoning: z.string().nullable().optional(),
    reasoning_content: z.string().nullable().optional(),
  })
  .loose();

export const ChatCompletion = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: int(),
    model: z.string(),
    choices: z.array(
      z
        .object({
          index: int(),
          message: ResponseMessage,
          logprobs: Logprobs.nullable().optional(),
          finish_reason: z.string().nullable(),
          stop_reason: z.union([int(), z.string()]).nullable().optional(),
          token_ids: z.array(int()).nullable().optional(),
        })
        .loose(),
    ),
    usage: Usage,
    service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority']).nullable().optional(),
    system_fingerprint: z.string().nullable().optional(),
    prompt_logprobs: z.array(z.record(z.string(), z.unknown()).nullable()).nullable().optional(),
    prompt_token_ids: z.array(int()).nullable().optional(),
    kv_transfer_params: record.nullable().optional(),
  })
  .loose();
export type ChatCompletion = z.infer<typeof ChatCompletion>;

export const ChatCompletionChunk = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion.chunk'),
    created: int(),
    model: z.string(),
    choices: z.array(
      z
        .object({
          index: int(),
          delta: z
            .object({
              role: z.string().optional(),
              content: z.string().nullable().optional(),
              reasoning: z.string().nullable().optional(),
              reasoning_content: z.string().nullable().optional(),
              tool_calls: z.array(z.object({ index: int() }).loose()).optional(),
            })
            .loose(),
          logprobs: Logprobs.nullable().optional(),
          finish_reason: z.string().nullable().optional(),
          stop_reason: z.union([int(), z.string()]).nullable().optional(),
          token_ids: z.array(int()).nullable().optional(),
        })
        .loose(),
    ),
    usage: Usage.nullable().optional(),
    prompt_token_ids: z.array(int()).nullable().optional(),
  })
  .loose();
export type ChatCompletionChunk = z.infer<typeof ChatCompletionChunk>;

export const Model = z
  .object({
    id: z.string(),
    object: z.literal('model'),
    created: int(),
    owned_by: z.string(),
    root: z.string().nullable(),
  })
  .loose();
export type Model = z.infer<typeof Model>;

export const ModelList = z.object({ object: z.literal('list'), data: z.array(Model) });
export type ModelList = z.infer<typeof ModelList>;

// ---- Errors (documented for OpenAPI; src/http/error-handler.ts renders them) ----

const ErrorObject = z.object({
  message: z.string(),
  type: z.string().describe('invalid_request_error, server_error or rate_limit_exceeded'),
  param: z.string().nullable(),
  code: z.string().nullable().describe('model_not_found, invalid_api_key, rate_limit_exceeded, upstream_unreachable, ...'),
});

/** OpenAI's error envelope, which the openai SDKs read. */
export const ErrorEnvelope = z.object({ error: ErrorObject });

/** FastAPI's 422 detail form, with the OpenAI envelope beside it. */
export const ValidationErrorBody = z.object({
  detail: z.array(
    z.object({
      type: z.string(),
      loc: z.array(z.union([z.string(), z.number()])),
      msg: z.string(),
      input: z.unknown().optional().describe('Absent when the field was'),
      ctx: z.record(z.string(), z.unknown()).optional(),
    }),
  ),
  error: ErrorObject,
});
