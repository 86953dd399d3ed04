import { z } from 'zod';
import type { LaxKind } from './exact-json.js';

/**
 * Chat completion request and response schemas: every field of the seed's request table, with the
 * ranges and cross-field rules vLLM enforces (reference/inference-api.md §1.3). Objects are loose so
 * that fields this gateway does not know reach the engine untouched; vLLM accepts and ignores extras.
 */

/**
 * Integers. The body parser reads integer literals a double would change as BigInt, checks the int64
 * range of top-level ones on the exact value and shows the schema a stand-in number (exact-json.ts),
 * so these check what a double can hold and the engine gets the client's digits.
 */
const int = () => z.number().int();
/** seed, priority, truncate_prompt_tokens: int64 in vLLM; documented as such, checked exactly by the body parser. */
const int64 = (min?: number) =>
  (min === undefined ? int() : int().min(min)).meta({ minimum: min ?? -9223372036854775808, maximum: 9223372036854775807, format: 'int64' });
const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();
const record = z.record(z.string(), z.unknown());

// Bounds on every list and string a request carries: far above what a client sends (a whole book in
// one message, a million prompt tokens), low enough that no single request can hold the gateway.
/** Message contents, prompts, chat templates, grammars. */
export const TEXT_MAX = 16 * 1024 * 1024;
/** Names, ids, stop strings, single tokens. */
export const NAME_MAX = 4096;
/** Messages, content parts, tools, stop strings, prompts of a batch. */
export const LIST_MAX = 65_536;
/** Token id lists (prompts given as ids, allowed ids, ...). */
const TOKENS_MAX = 4 * 1024 * 1024;
/** Keys of free-form maps (logit_bias, kwargs, xargs). */
const KEYS_MAX = 65_536;

const text = (max = TEXT_MAX) => z.string().max(max);
const name = () => z.string().max(NAME_MAX);
const list = <T extends z.ZodType>(item: T, max = LIST_MAX) => z.array(item).max(max);
const tokenIds = () => list(int(), TOKENS_MAX);
/** A map with at most KEYS_MAX keys, reported as pydantic reports a too-long collection. */
const boundedRecord = <T extends z.ZodType>(value: T) =>
  z.record(z.string().max(NAME_MAX), value).refine((map) => Object.keys(map).length <= KEYS_MAX, {
    message: `Dictionary should have at most ${KEYS_MAX} items`,
  });
const object = boundedRecord(z.unknown());

/**
 * vLLM's request ids are any string; the gateway encodes one that cannot travel as a header value
 * (request-id.ts). Bounded so that its encoded form stays within header limits.
 */
export const REQUEST_ID_MAX = 512;

/**
 * A content part. vLLM also takes parts without `type` that carry their media directly
 * (`{"image_url": ...}`, `{"audio_url": ...}`, `{"video_url": ...}`) and infers the type.
 */
const MEDIA_KEYS = ['image_url', 'audio_url', 'video_url', 'input_audio', 'image_embeds'] as const;
const ContentPart = z
  .looseObject({ type: name().optional(), text: text().nullable().optional() })
  .refine((part) => part.type !== undefined || MEDIA_KEYS.some((key) => (part as Record<string, unknown>)[key] !== undefined), {
    message: `Missing 'type' field in multimodal part: a part without \`type\` needs one of ${MEDIA_KEYS.join(', ')}`,
  });

export const ChatMessage = z
  .object({
    role: name(),
    // Strings, content-part arrays (text, images, ...), or null on assistant turns that only call tools.
    content: z.union([text(), list(ContentPart), z.null()]).optional(),
    name: name().nullable().optional(),
    tool_calls: nullable(list(z.looseObject({}))),
    tool_call_id: nullable(name()),
    reasoning: nullable(text()),
    reasoning_content: nullable(text()),
  })
  .loose();
export type ChatMessage = z.infer<typeof ChatMessage>;

const JsonSchemaFormat = z
  .object({
    name: name(),
    description: nullable(text()),
    schema: nullable(object),
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

/** vLLM defaults a tool's `type` (and a named tool_choice's) to "function". */
export const Tool = z
  .object({
    type: z.literal('function').optional(),
    function: z
      .object({
        name: name().min(1),
        description: nullable(text()),
        parameters: nullable(object),
        strict: z.boolean().nullable().optional(),
      })
      .loose(),
  })
  .loose();

export const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.literal('function').optional(), function: z.object({ name: name().min(1) }).loose() }).loose(),
]);

export const StructuredOutputs = z
  .object({
    json: z.union([text(), object]).nullable().optional(),
    regex: nullable(text()),
    choice: nullable(list(text())),
    grammar: nullable(text()),
    json_object: z.boolean().nullable().optional(),
    disable_fallback: z.boolean().optional(),
    disable_any_whitespace: z.boolean().optional(),
    disable_additional_properties: z.boolean().optional(),
    whitespace_pattern: nullable(text()),
    structural_tag: nullable(text()),
    _backend: nullable(name()),
    _backend_was_auto: z.boolean().optional(),
  })
  .loose();

const LogitsProcessor = z.union([
  name(),
  z.object({ qualname: name(), args: list(z.unknown()).optional(), kwargs: object.optional() }).loose(),
]);

const XargValue = z.union([text(), z.number()]);

/**
 * The sampling and engine fields chat and text completions share (vLLM's protocol models and
 * SamplingParams), with the ranges vLLM enforces.
 */
const samplingFields = {
  model: nullable(name()),
  frequency_penalty: nullable(z.number().min(-2).max(2)),
  logit_bias: nullable(boundedRecord(z.number())),
  max_tokens: nullable(int().min(1)),
  n: nullable(int().min(1)),
  presence_penalty: nullable(z.number().min(-2).max(2)),
  seed: nullable(int64()),
  // vLLM: "stop cannot contain an empty string".
  stop: nullable(z.union([name().min(1), list(name().min(1))])),
  stream: nullable(z.boolean()),
  stream_options: nullable(
    z
      .object({ include_usage: nullable(z.boolean()), continuous_usage_stats: nullable(z.boolean()) })
      .loose(),
  ),
  temperature: nullable(z.number().min(0).max(2)),
  top_p: nullable(z.number().gt(0).max(1)),
  user: nullable(name()),
  use_beam_search: z.boolean().optional(),
  top_k: nullable(int().min(-1)),
  min_p: nullable(z.number().min(0).max(1)),
  repetition_penalty: nullable(z.number().gt(0)),
  length_penalty: z.number().optional(),
  stop_token_ids: nullable(tokenIds()),
  include_stop_str_in_output: z.boolean().optional(),
  ignore_eos: z.boolean().optional(),
  min_tokens: int().min(0).optional(),
  skip_special_tokens: z.boolean().optional(),
  spaces_between_special_tokens: z.boolean().optional(),
  truncate_prompt_tokens: nullable(int64(-1)),
  prompt_logprobs: nullable(int().min(-1)),
  allowed_token_ids: nullable(tokenIds()),
  bad_words: list(name().min(1)).optional(),
  echo: z.boolean().optional(),
  add_special_tokens: z.boolean().optional(),
  response_format: nullable(ResponseFormat),
  structured_outputs: nullable(StructuredOutputs),
  priority: int64().optional(),
  // Any string, as in vLLM; the x-request-id header wins over it.
  request_id: name().max(REQUEST_ID_MAX).optional(),
  logits_processors: nullable(list(LogitsProcessor)),
  return_tokens_as_token_ids: nullable(z.boolean()),
  return_token_ids: nullable(z.boolean()),
  cache_salt: nullable(name().min(1)),
  kv_transfer_params: nullable(object),
  mm_processor_kwargs: nullable(object),
  /** Forwarded as the engine's extension field (`vllm_xargs` for vLLM). */
  engine_xargs: nullable(boundedRecord(z.union([XargValue, list(XargValue)]))),
};

const ChatCompletionRequestShape = z
  .object({
    ...samplingFields,
    messages: list(ChatMessage).min(1),
    logprobs: nullable(z.boolean()),
    // -1 asks for the whole vocabulary (vLLM); other negatives are rejected below.
    top_logprobs: nullable(int().min(-1)),
    /** The API's newer name for max_tokens; either is honoured. */
    max_completion_tokens: nullable(int().min(1)),
    tools: nullable(list(Tool).min(1)),
    tool_choice: nullable(ToolChoice),
    // The seed lists low/medium/high; current engines and the openai SDK also send the others.
    reasoning_effort: nullable(z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'])),
    include_reasoning: z.boolean().optional(),
    parallel_tool_calls: nullable(z.boolean()),
    add_generation_prompt: z.boolean().optional(),
    continue_final_message: z.boolean().optional(),
    documents: nullable(list(boundedRecord(text()))),
    chat_template: nullable(text()),
    chat_template_kwargs: nullable(object),
  })
  .loose();

/** Top-level scalars of the request bodies that pydantic's lax mode coerces from strings (and booleans from 0/1). */
export const LAX_FIELDS: Readonly<Record<string, LaxKind>> = {
  frequency_penalty: 'float',
  presence_penalty: 'float',
  temperature: 'float',
  top_p: 'float',
  min_p: 'float',
  repetition_penalty: 'float',
  length_penalty: 'float',
  max_tokens: 'int',
  max_completion_tokens: 'int',
  n: 'int',
  best_of: 'int',
  seed: 'int',
  top_k: 'int',
  min_tokens: 'int',
  top_logprobs: 'int',
  prompt_logprobs: 'int',
  truncate_prompt_tokens: 'int',
  priority: 'int',
  logprobs: 'bool',
  stream: 'bool',
  echo: 'bool',
  use_beam_search: 'bool',
  ignore_eos: 'bool',
  include_stop_str_in_output: 'bool',
  skip_special_tokens: 'bool',
  spaces_between_special_tokens: 'bool',
  add_special_tokens: 'bool',
  add_generation_prompt: 'bool',
  continue_final_message: 'bool',
  parallel_tool_calls: 'bool',
  include_reasoning: 'bool',
  return_tokens_as_token_ids: 'bool',
  return_token_ids: 'bool',
  return_token_strs: 'bool',
};

type RequestShape = z.infer<typeof ChatCompletionRequestShape>;

/** Text completions: a prompt (text, texts, token ids or lists of them) instead of messages. */
const CompletionRequestShape = z
  .object({
    ...samplingFields,
    // 0 only with echo (checked below).
    max_tokens: nullable(int().min(0)),
    prompt: nullable(z.union([text(), list(text()).min(1), tokenIds().min(1), list(tokenIds().min(1)).min(1)])),
    prompt_embeds: nullable(z.union([text(), list(text())])),
    suffix: nullable(text()),
    best_of: nullable(int().min(1)),
    // Completions take an integer here: the top alternatives per token (-1: the whole vocabulary).
    logprobs: nullable(int().min(-1)),
    return_tokens_as_token_ids: nullable(z.boolean()),
  })
  .loose();

export const COMPLETION_LAX_FIELDS: Readonly<Record<string, LaxKind>> = { ...LAX_FIELDS, logprobs: 'int' };


/** Below this temperature vLLM samples greedily (sampling_params.py `_SAMPLING_EPS`). */
export const GREEDY_EPSILON = 1e-5;

const STRUCTURED_KINDS = ['json', 'regex', 'choice', 'grammar', 'json_object', 'structural_tag'] as const;

/** The engine's cross-field rules, each reported at the field a client has to change. */
function crossFieldRules(body: RequestShape, ctx: z.RefinementCtx): void {
  // Also run on text completions, whose chat-only fields are absent (and whose logprobs is an integer).
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
/** The schema's field order, which its parsed output follows. */
export const CHAT_FIELDS: readonly string[] = Object.keys(ChatCompletionRequestShape.shape);
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

export const CompletionRequest = CompletionRequestShape.superRefine((body, ctx) => {
  if ((body.prompt == null) === (body.prompt_embeds == null)) {
    ctx.addIssue({ code: 'custom', path: ['prompt'], message: 'exactly one of `prompt` or `prompt_embeds` must be given', input: body.prompt ?? null });
  }
  // vLLM scores a prompt without generating: `echo` with max_tokens 0 (echo_without_generation).
  if (body.max_tokens === 0 && body.echo !== true) {
    ctx.addIssue({ code: 'custom', path: ['max_tokens'], message: 'max_tokens must be at least 1, or 0 with `echo` (the prompt scored, nothing generated)', input: 0 });
  }
  crossFieldRules({ ...body, logprobs: undefined } as unknown as RequestShape, ctx);
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;
export const COMPLETION_FIELDS: readonly string[] = Object.keys(CompletionRequestShape.shape);

/**
 * vLLM's /tokenize: a prompt (TokenizeCompletionRequest) or chat messages (TokenizeChatRequest); with
 * both, vLLM tokenizes the messages, and so does the engine the body is sent to.
 */
export const TokenizeRequest = z
  .object({
    model: nullable(name()),
    prompt: nullable(text()),
    messages: nullable(list(ChatMessage)),
    add_special_tokens: z.boolean().optional(),
    add_generation_prompt: z.boolean().optional(),
    continue_final_message: z.boolean().optional(),
    return_token_strs: nullable(z.boolean()),
    chat_template: nullable(text()),
    chat_template_kwargs: nullable(object),
    mm_processor_kwargs: nullable(object),
    tools: nullable(list(Tool)),
  })
  .loose()
  .superRefine((body, ctx) => {
    if (body.prompt == null && body.messages == null) {
      ctx.addIssue({ code: 'custom', path: ['prompt'], message: 'send `prompt` or `messages`', input: null });
    }
  });
export type TokenizeRequest = z.infer<typeof TokenizeRequest>;

export const DetokenizeRequest = z.object({ model: nullable(name()), tokens: tokenIds() }).loose();
export type DetokenizeRequest = z.infer<typeof DetokenizeRequest>;

/** Any of the bodies the gateway routes to an engine. */
export type EngineRequestBody = ChatCompletionRequest | CompletionRequest | TokenizeRequest | DetokenizeRequest;

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

/** vLLM's ModelPermission, as its /v1/models lists it. */
export const ModelPermission = z
  .object({
    id: z.string(),
    object: z.literal('model_permission'),
    created: int(),
    allow_create_engine: z.boolean(),
    allow_sampling: z.boolean(),
    allow_logprobs: z.boolean(),
    allow_search_indices: z.boolean(),
    allow_view: z.boolean(),
    allow_fine_tuning: z.boolean(),
    organization: z.string(),
    group: z.string().nullable(),
    is_blocking: z.boolean(),
  })
  .loose();
export type ModelPermission = z.infer<typeof ModelPermission>;

export const Model = z
  .object({
    id: z.string(),
    object: z.literal('model'),
    created: int(),
    owned_by: z.string(),
    root: z.string().nullable().describe('Base models: what the engine reports (its weights). Trained models: the trained model\'s name.'),
    parent: z.string().nullable().describe('null for base models; the base model of a trained model'),
    max_model_len: int().nullable().describe('The context length the engine serves the model with, when it reports one'),
    permission: z.array(ModelPermission),
  })
  .loose();
export type Model = z.infer<typeof Model>;

export const ModelList = z.object({ object: z.literal('list'), data: z.array(Model) });
export type ModelList = z.infer<typeof ModelList>;

/**
 * A model id in the path of GET /v1/models/{id}. Bounded well below NAME_MAX: percent-encoded, each character
 * may take 12 bytes of the request line, and Node answers a request line over 16 KB with its own 431.
 */
export const ModelParams = z.object({ model: z.string().max(512).describe('A model id as /v1/models lists it (may contain slashes)') });

export const Completion = z
  .object({
    id: z.string(),
    object: z.literal('text_completion'),
    created: int(),
    model: z.string(),
    choices: z.array(
      z
        .object({
          index: int(),
          text: z.string(),
          logprobs: record.nullable().optional(),
          finish_reason: z.string().nullable(),
          stop_reason: z.union([int(), z.string()]).nullable().optional(),
          prompt_logprobs: z.array(record.nullable()).nullable().optional(),
          prompt_token_ids: z.array(int()).nullable().optional(),
          token_ids: z.array(int()).nullable().optional(),
        })
        .loose(),
    ),
    usage: Usage.nullable().optional(),
  })
  .loose();

export const TokenizeResponse = z
  .object({ count: int(), max_model_len: int(), tokens: z.array(int()), token_strs: z.array(z.string()).nullable().optional() })
  .loose();
export const DetokenizeResponse = z.object({ prompt: z.string() }).loose();

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
