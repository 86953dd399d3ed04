import type { Call } from './types.js';

/** Figures a calls table shows, read from `summary` (usage per model, costs when include_costs). */

export function tokensOf(call: Call): number | undefined {
  const usage = call.summary?.usage;
  if (!usage) return undefined;
  let total = 0;
  for (const u of Object.values(usage)) total += u.total_tokens ?? (u.prompt_tokens ?? 0) + (u.completion_tokens ?? 0);
  return total;
}

export function costOf(call: Call): number | undefined {
  const costs = call.summary?.weave?.costs;
  if (!costs) return undefined;
  let total = 0;
  for (const c of Object.values(costs)) total += (c.prompt_tokens_total_cost ?? 0) + (c.completion_tokens_total_cost ?? 0);
  return total;
}

export function opLabel(call: Call): string {
  return call.display_name ?? call.summary?.weave?.trace_name ?? call.op_name;
}

/** The columns a list asks for: never inputs or output, which can be large. */
export const LIST_COLUMNS = ['id', 'trace_id', 'parent_id', 'op_name', 'display_name', 'started_at', 'ended_at', 'exception', 'summary'];
