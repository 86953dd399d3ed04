import { z } from 'zod';
import { Query } from '../query/schema.js';
import { DateTime, FieldList, indexedKey, Key, Limit, Offset, ProjectId, SortByList, TRACING_LIMITS } from './common.js';

/** Custom LLM prices (reference §2.8). Costs are per token, e.g. 3e-05. */

export const MAX_TOKEN_COST = 1e6;

export const CostCreateInput = z.object({
  // Bounded so that cost totals stay finite numbers (a huge price made include_costs answer null).
  prompt_token_cost: z.number().min(0).max(MAX_TOKEN_COST).describe('Per token, 0 to 1e6.'),
  completion_token_cost: z.number().min(0).max(MAX_TOKEN_COST).describe('Per token, 0 to 1e6.'),
  prompt_token_cost_unit: Key.min(1).nullish().describe('Default USD.'),
  completion_token_cost_unit: Key.min(1).nullish().describe('Default USD.'),
  effective_date: DateTime.nullish().describe('Default: now.'),
  provider_id: Key.min(1).nullish().describe('Default "default".'),
});
export type CostCreateInput = z.infer<typeof CostCreateInput>;

export const CostCreateBody = z.object({
  project_id: ProjectId,
  costs: z
    .record(indexedKey('llm_id').min(1), CostCreateInput)
    .refine((costs) => Object.keys(costs).length <= TRACING_LIMITS.batchItems, `at most ${TRACING_LIMITS.batchItems} models in one request`)
    .describe(`llm_id → price; at most ${TRACING_LIMITS.batchItems} models`),
  wb_user_id: Key.nullish().describe('Ignored: set from the key.'),
});
// Each pair as a two-string array, not a tuple: schemathesis 4.32 rewrites a 3.1 tuple (prefixItems with items
// false) into a schema its own response check then refuses as invalid, erroring the fuzz run.
export const CostCreateResponse = z.object({ ids: z.array(z.array(z.string()).length(2)).describe('[cost_id, llm_id] pairs') });

export const CostQueryBody = z.object({
  project_id: ProjectId,
  fields: FieldList.nullish(),
  query: Query.nullish(),
  sort_by: SortByList.nullish(),
  limit: Limit,
  offset: Offset,
});
export const CostQueryOutput = z
  .object({
    id: z.string(),
    llm_id: z.string(),
    prompt_token_cost: z.number(),
    completion_token_cost: z.number(),
    prompt_token_cost_unit: z.string(),
    completion_token_cost_unit: z.string(),
    effective_date: z.string(),
    provider_id: z.string(),
  })
  .partial();
export const CostQueryResponse = z.object({ results: z.array(CostQueryOutput) });

export const CostPurgeBody = z.object({ project_id: ProjectId, query: Query.describe('Ids only: $eq on id, $or of those, or $in on id.') });
