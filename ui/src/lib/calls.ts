import { api } from './api.js';
import { useLoad, type Loaded } from './hooks.js';
import type { Call } from './types.js';

/**
 * Figures a calls table shows, read from `summary` (usage per model, costs when include_costs). Any client
 * writes `summary`, so an entry may be null, and a count a string: only finite numbers are added up, and
 * a call with none shows no figure.
 */

/**
 * A number the summary holds, or undefined for anything else (null, "15", NaN). A call's detail is read
 * with its exact numbers as raw JSON (lib/api.ts `exactNumbers`): such a value counts as its number.
 */
function count(value: unknown): number | undefined {
  const number = isRawJson(value) ? Number(value.rawJSON) : value;
  return typeof number === 'number' && Number.isFinite(number) ? number : undefined;
}

/** Whether a value is a number read with its exact text (lib/api.ts `exactNumbers`). */
export const isRawJson = (value: unknown): value is { rawJSON: string } =>
  (JSON as { isRawJSON?: (value: unknown) => boolean }).isRawJSON?.(value) === true;

/** Each entry of a summary map that is an object (`{model: {...}}`); nulls and scalars are left out. */
function entries(map: unknown): Record<string, unknown>[] {
  if (!map || typeof map !== 'object') return [];
  return Object.values(map).filter((v): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v));
}

/** Sums `pick` over the entries; undefined when no entry has a number. */
function sum(map: unknown, pick: (entry: Record<string, unknown>) => number | undefined): number | undefined {
  let total: number | undefined;
  for (const entry of entries(map)) {
    const value = pick(entry);
    if (value !== undefined) total = (total ?? 0) + value;
  }
  return total;
}

export function tokensOf(call: Call): number | undefined {
  return sum(call.summary?.usage, (u) => {
    const total = count(u.total_tokens);
    if (total !== undefined) return total;
    const prompt = count(u.prompt_tokens);
    const completion = count(u.completion_tokens);
    return prompt === undefined && completion === undefined ? undefined : (prompt ?? 0) + (completion ?? 0);
  });
}

export function costOf(call: Call): number | undefined {
  return sum(call.summary?.weave?.costs, (c) => {
    const prompt = count(c.prompt_tokens_total_cost);
    const completion = count(c.completion_tokens_total_cost);
    return prompt === undefined && completion === undefined ? undefined : (prompt ?? 0) + (completion ?? 0);
  });
}

export function opLabel(call: Call): string {
  return call.display_name ?? call.summary?.weave?.trace_name ?? call.op_name;
}

/** The columns a list asks for: never inputs or output, which can be large. */
export const LIST_COLUMNS = ['id', 'trace_id', 'parent_id', 'op_name', 'display_name', 'started_at', 'ended_at', 'exception', 'summary'];

/** What a page of calls asks /traces/calls/query for, besides the project, limit and offset. */
export interface CallsRequest {
  filter?: unknown;
  query?: unknown;
  sort_by: { field: string; direction: 'asc' | 'desc' }[];
  columns: string[];
  expand_columns?: string[];
  include_costs?: boolean;
}

/**
 * Page `page` (from 0, `size` calls) of a calls query and how many calls match it (`query_stats`):
 * `key` names the filter and query (sort and page are added to it: a new order needs no new count),
 * `pages` is undefined until the count is known.
 * `exactNumbers`: payloads shown as JSON keep their exact numbers (lib/api.ts).
 */
export function useCallPage(
  key: string,
  project: string,
  request: CallsRequest,
  page: number,
  size: number,
  exactNumbers = false,
): { calls: Loaded<{ calls: Call[] }>; error: string | undefined; count: number | undefined; pages: number | undefined } {
  const calls = useLoad(`${key}|${JSON.stringify(request.sort_by)}|${page}`, () =>
    api<{ calls: Call[] }>('/traces/calls/query', {
      method: 'POST',
      body: { project_id: project, ...request, limit: size, offset: page * size },
      exactNumbers,
    }),
  );
  const stats = useLoad(key, () =>
    api<{ count: number }>('/traces/calls/query_stats', { method: 'POST', body: { project_id: project, filter: request.filter, query: request.query } }),
  );
  const count = stats.data?.count;
  return { calls, error: calls.error ?? stats.error, count, pages: count === undefined ? undefined : Math.max(1, Math.ceil(count / size)) };
}
