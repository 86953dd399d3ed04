import { sql, type RawBuilder } from 'kysely';
import { chunksForParameters } from '../../db/limits.js';
import { compileExpr } from '../query/expr.js';
import type { Query, SortBy } from '../query/schema.js';
import { tableFieldResolver, tableOrderBy, type TableFields } from '../query/table-fields.js';
import { isoText, toInt, type Executor } from './common.js';

/** trace_llm_prices: default rows (seeded) and project rows (reference §2.8). */

const FIELDS: TableFields = {
  table: 'trace_llm_prices',
  columns: {
    id: 'text',
    llm_id: 'text',
    provider_id: 'text',
    pricing_level: 'text',
    pricing_level_id: 'text',
    prompt_token_cost: 'numeric',
    completion_token_cost: 'numeric',
    prompt_token_cost_unit: 'text',
    completion_token_cost_unit: 'text',
    effective_date: 'timestamptz',
    created_by: 'text',
    created_at: 'timestamptz',
  },
};
const resolve = tableFieldResolver(FIELDS);
export const COST_FIELDS = Object.keys(FIELDS.columns);

export interface PriceWrite {
  id: string;
  projectId: string;
  llmId: string;
  providerId: string;
  effectiveDate: string;
  promptTokenCost: number;
  completionTokenCost: number;
  promptTokenCostUnit: string;
  completionTokenCostUnit: string;
  createdBy: string;
}

/** Columns one inserted price row binds. */
const PRICE_COLUMNS = 11;

export async function insertProjectPrices(db: Executor, rows: readonly PriceWrite[]): Promise<void> {
  for (const chunk of chunksForParameters(rows, PRICE_COLUMNS)) {
    await db
      .insertInto('trace_llm_prices')
      .values(
        chunk.map((r) => ({
          id: r.id,
          pricing_level: 'project' as const,
          pricing_level_id: r.projectId,
          provider_id: r.providerId,
          llm_id: r.llmId,
          effective_date: r.effectiveDate,
          prompt_token_cost: r.promptTokenCost,
          completion_token_cost: r.completionTokenCost,
          prompt_token_cost_unit: r.promptTokenCostUnit,
          completion_token_cost_unit: r.completionTokenCostUnit,
          created_by: r.createdBy,
        })),
      )
      .execute();
  }
}

/** Only the project's own rows: the default table is neither visible to /cost/query nor purgeable. */
const projectRows = (projectId: string) => sql`trace_llm_prices.pricing_level = 'project' and trace_llm_prices.pricing_level_id = ${projectId}`;

function fieldSql(field: string): RawBuilder<unknown> {
  const value = resolve(field);
  if (value.kind === 'typed' && value.type === 'timestamptz') return isoText(value.sql);
  return value.sql;
}

export async function queryProjectPrices(
  db: Executor,
  args: { projectId: string; fields: readonly string[]; query?: Query | null; sortBy?: readonly SortBy[] | null; limit?: number | null; offset?: number | null },
): Promise<Record<string, unknown>[]> {
  const conditions = [projectRows(args.projectId)];
  if (args.query) conditions.push(compileExpr(args.query.$expr, resolve));
  const order = tableOrderBy(resolve, args.sortBy ?? [], sql`trace_llm_prices.created_at asc, trace_llm_prices.id asc`);
  const items = args.fields.map((field, i) => sql`${fieldSql(field)} as ${sql.ref(`f${i}`)}`);
  const { rows } = await sql<Record<string, unknown>>`select ${sql.join(items)} from trace_llm_prices where ${sql.join(conditions, sql` and `)}
    order by ${order} ${args.limit != null ? sql`limit ${args.limit}` : sql``} ${args.offset ? sql`offset ${args.offset}` : sql``}`.execute(db);
  return rows.map((row) => Object.fromEntries(args.fields.map((field, i) => [field, normalise(row[`f${i}`])])));
}

/** double precision comes back as a number from both drivers; numeric expressions do not. */
function normalise(value: unknown): unknown {
  return typeof value === 'string' && /^-?\d+(\.\d+)?(e[-+]?\d+)?$/i.test(value) ? Number(value) : value;
}

export async function deleteProjectPrices(db: Executor, args: { projectId: string; ids: readonly string[] }): Promise<number> {
  let deleted = 0;
  for (const ids of chunksForParameters(args.ids, 1)) {
    const result = await db
      .deleteFrom('trace_llm_prices')
      .where('pricing_level', '=', 'project')
      .where('pricing_level_id', '=', args.projectId)
      .where('id', 'in', ids)
      .executeTakeFirst();
    deleted += toInt(result.numDeletedRows);
  }
  return deleted;
}

export interface PriceRow {
  id: string;
  llm_id: string;
  provider_id: string;
  pricing_level: 'default' | 'project';
  pricing_level_id: string;
  prompt_token_cost: number;
  completion_token_cost: number;
  prompt_token_cost_unit: string;
  completion_token_cost_unit: string;
  effective_date: string;
  created_by: string;
  created_at: string;
}

/** Every default and project price row for these models: the candidates include_costs chooses from. */
export async function pricesFor(db: Executor, args: { projectId: string; llmIds: readonly string[] }): Promise<PriceRow[]> {
  const rows: PriceRow[] = [];
  for (const llmIds of chunksForParameters(args.llmIds, 1)) rows.push(...(await pricesOf(db, args.projectId, llmIds)));
  return rows.map((row) => ({ ...row, prompt_token_cost: Number(row.prompt_token_cost), completion_token_cost: Number(row.completion_token_cost) }));
}

async function pricesOf(db: Executor, projectId: string, llmIds: readonly string[]): Promise<PriceRow[]> {
  const { rows } = await sql<PriceRow>`select id, llm_id, provider_id, pricing_level, pricing_level_id, prompt_token_cost, completion_token_cost,
      prompt_token_cost_unit, completion_token_cost_unit, ${isoText(sql.ref('effective_date'))} as effective_date, created_by,
      ${isoText(sql.ref('created_at'))} as created_at
    from trace_llm_prices
    where llm_id in (${sql.join([...llmIds])})
      and (pricing_level = 'default' or (pricing_level = 'project' and pricing_level_id = ${projectId}))`.execute(db);
  return rows;
}
