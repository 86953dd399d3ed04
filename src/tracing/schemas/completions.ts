import { z } from 'zod';
import { boundedDepth } from '../../http/json-depth.js';
import { JsonObject, Key, ProjectId, TRACING_LIMITS } from './common.js';

/** Completions through the inference gateway (reference §2.10). */

export const CompletionsInputs = z
  .looseObject({
    model: Key.min(1).describe('Any model the key can reach on this server\'s gateway (GET /v1/models).'),
    messages: z.array(JsonObject).max(TRACING_LIMITS.batchItems).describe('OpenAI chat messages'),
    template_vars: z.record(z.string(), z.unknown()).nullish().describe('`{name}` placeholders in string message contents are replaced.'),
    prompt: Key.nullish().describe("A saved Prompt in the project (weave:/// ref, name:version or name): its messages go before `messages`."),
  })
  .describe('OpenAI chat completion parameters; other fields are passed to the gateway as they are.');

export const CompletionsCreateBody = z.object({
  project_id: ProjectId,
  inputs: boundedDepth(CompletionsInputs),
  track_llm_call: z.boolean().nullish().describe('Default true: record a weave.completions_create call.'),
  wb_user_id: Key.nullish().describe('Ignored: set from the key.'),
});
export type CompletionsCreateBody = z.infer<typeof CompletionsCreateBody>;

export const CompletionsCreateResponse = z.object({
  response: z.record(z.string(), z.unknown()).describe('The chat.completion, or {"error": "<message>"} when the model or its engine failed.'),
  weave_call_id: z.string().nullish(),
});
