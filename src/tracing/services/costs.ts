import { purgeIds } from '../query/table-fields.js';
import type { Query, SortBy } from '../query/schema.js';
import { uuidv7 } from '../ids.js';
import { isJsonObject, numberOf } from '../exact-numbers.js';
import * as repo from '../repositories/costs.js';
import type { CostCreateInput } from '../schemas/costs.js';
import type { TracingDeps } from './deps.js';

/** Custom LLM prices and the costs of calls (reference §2.8, §3.9). */

/** The fields /cost/query answers by default (CostQueryOutput). */
const DEFAULT_FIELDS = ['id', 'llm_id', 'prompt_token_cost', 'completion_token_cost', 'prompt_token_cost_unit', 'completion_token_cost_unit', 'effective_date', 'provider_id'];

/** Creates one project price per entry; answers `[cost_id, llm_id]` pairs as the weave servers emit them. */
export async function createCosts(deps: TracingDeps, args: { projectId: string; userId: string; costs: Record<string, CostCreateInput> }): Promise<[string, string][]> {
  const now = new Date().toISOString();
  const rows: repo.PriceWrite[] = Object.entries(args.costs).map(([llmId, cost]) => ({
    id: uuidv7(),
    projectId: args.projectId,
    llmId,
    providerId: cost.provider_id ?? 'default',
    effectiveDate: cost.effective_date ?? now,
    promptTokenCost: cost.prompt_token_cost,
    completionTokenCost: cost.completion_token_cost,
    promptTokenCostUnit: cost.prompt_token_cost_unit ?? 'USD',
    completionTokenCostUnit: cost.completion_token_cost_unit ?? 'USD',
    createdBy: args.userId,
  }));
  await deps.db.transaction().execute((trx) => repo.insertProjectPrices(trx, rows));
  return rows.map((row) => [row.id, row.llmId]);
}

export async function queryCosts(
  deps: TracingDeps,
  args: { projectId: string; fields?: readonly string[] | null; query?: Query | null; sortBy?: readonly SortBy[] | null; limit?: number | null; offset?: number | null },
): Promise<Record<string, unknown>[]> {
  return repo.queryProjectPrices(deps.db, { ...args, fields: args.fields?.length ? args.fields : DEFAULT_FIELDS });
}

export async function purgeCosts(deps: TracingDeps, args: { projectId: string; query: Query }): Promise<void> {
  await repo.deleteProjectPrices(deps.db, { projectId: args.projectId, ids: purgeIds(args.query, 'cost') });
}

const count = (value: unknown): number => numberOf(value) ?? 0;

/**
 * The price that applies to a call started at `startedAt` (reference §3.9): rows in effect at the
 * start win over future ones, then a project price over a default one, then the latest effective date.
 */
export function effectivePrice(candidates: readonly repo.PriceRow[], startedAt: string): repo.PriceRow | undefined {
  const start = Date.parse(startedAt);
  const rank = (row: repo.PriceRow): [number, number, number] => [
    Date.parse(row.effective_date) <= start ? 1 : 0,
    row.pricing_level === 'project' ? 1 : 0,
    Date.parse(row.effective_date),
  ];
  let best: repo.PriceRow | undefined;
  let bestRank: [number, number, number] | undefined;
  for (const row of candidates) {
    const r = rank(row);
    if (!bestRank || r[0] > bestRank[0] || (r[0] === bestRank[0] && (r[1] > bestRank[1] || (r[1] === bestRank[1] && r[2] > bestRank[2])))) {
      best = row;
      bestRank = r;
    }
  }
  return best;
}

/** `summary.weave.costs` of one call: an entry per model of `summary.usage` that has a price. */
export function callCosts(usage: Record<string, unknown>, startedAt: string, prices: Map<string, repo.PriceRow[]>): Record<string, unknown> {
  const costs: Record<string, unknown> = {};
  for (const [model, raw] of Object.entries(usage)) {
    if (!isJsonObject(raw)) continue;
    const price = effectivePrice(prices.get(model) ?? [], startedAt);
    if (!price) continue;
    const promptTokens = count(raw.prompt_tokens) + count(raw.input_tokens);
    const completionTokens = count(raw.completion_tokens) + count(raw.output_tokens);
    costs[model] = {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      requests: count(raw.requests),
      total_tokens: count(raw.total_tokens),
      prompt_tokens_total_cost: promptTokens * price.prompt_token_cost,
      completion_tokens_total_cost: completionTokens * price.completion_token_cost,
      prompt_token_cost: price.prompt_token_cost,
      completion_token_cost: price.completion_token_cost,
      prompt_token_cost_unit: price.prompt_token_cost_unit,
      completion_token_cost_unit: price.completion_token_cost_unit,
      effective_date: price.effective_date,
      provider_id: price.provider_id,
      pricing_level: price.pricing_level,
      pricing_level_id: price.pricing_level_id,
      created_at: price.created_at,
      created_by: price.created_by,
    };
  }
  return costs;
}

/** Adds `summary.weave.costs` to calls (in place), reading the prices of all their models at once. */
export async function addCosts(deps: TracingDeps, projectId: string, calls: Record<string, unknown>[]): Promise<void> {
  const models = new Set<string>();
  const usageOf = (call: Record<string, unknown>) => {
    const summary = call.summary;
    return isJsonObject(summary) && isJsonObject(summary.usage) ? summary.usage : undefined;
  };
  for (const call of calls) for (const model of Object.keys(usageOf(call) ?? {})) models.add(model);
  const rows = await repo.pricesFor(deps.db, { projectId, llmIds: [...models] });
  const prices = new Map<string, repo.PriceRow[]>();
  for (const row of rows) prices.set(row.llm_id, [...(prices.get(row.llm_id) ?? []), row]);
  for (const call of calls) {
    const summary = call.summary;
    if (!isJsonObject(summary)) continue;
    const costs = callCosts(usageOf(call) ?? {}, String(call.started_at), prices);
    // weave's server leaves `costs` out when no model of the call has a price (not `costs: {}`).
    if (Object.keys(costs).length === 0) continue;
    const weave = isJsonObject(summary.weave) ? summary.weave : {};
    summary.weave = { ...weave, costs };
  }
}
