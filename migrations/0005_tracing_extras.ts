import { sql, type Kysely } from 'kysely';
import { DEFAULT_PRICES, DEFAULT_PRICES_DATE } from '../src/tracing/default-prices.js';

/** Tracing, second half: feedback and LLM prices (src/tracing/tables.ts), with the default price table seeded. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('trace_feedback')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('weave_ref', 'text', (c) => c.notNull())
    .addColumn('wb_user_id', 'text', (c) => c.notNull())
    .addColumn('creator', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('feedback_type', 'text', (c) => c.notNull())
    .addColumn('payload', 'jsonb', (c) => c.notNull())
    .addColumn('annotation_ref', 'text')
    .addColumn('runnable_ref', 'text')
    .addColumn('call_ref', 'text')
    .addColumn('trigger_ref', 'text')
    .addColumn('queue_id', 'text')
    .addPrimaryKeyConstraint('trace_feedback_pk', ['project_id', 'id'])
    .execute();
  // include_feedback reads the feedback of a page of calls by their refs.
  await db.schema.createIndex('trace_feedback_ref_idx').on('trace_feedback').columns(['project_id', 'weave_ref', 'created_at']).execute();

  await db.schema
    .createTable('trace_llm_prices')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('pricing_level', 'text', (c) => c.notNull().check(sql`pricing_level in ('default', 'project')`))
    .addColumn('pricing_level_id', 'text', (c) => c.notNull())
    .addColumn('provider_id', 'text', (c) => c.notNull())
    .addColumn('llm_id', 'text', (c) => c.notNull())
    .addColumn('effective_date', 'timestamptz', (c) => c.notNull())
    .addColumn('prompt_token_cost', 'double precision', (c) => c.notNull())
    .addColumn('completion_token_cost', 'double precision', (c) => c.notNull())
    .addColumn('prompt_token_cost_unit', 'text', (c) => c.notNull())
    .addColumn('completion_token_cost_unit', 'text', (c) => c.notNull())
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema
    .createIndex('trace_llm_prices_lookup_idx')
    .on('trace_llm_prices')
    .columns(['llm_id', 'pricing_level', 'pricing_level_id', 'effective_date'])
    .execute();
  await db.schema.createIndex('trace_llm_prices_level_idx').on('trace_llm_prices').columns(['pricing_level_id', 'pricing_level']).execute();

  await (db as Kysely<{ trace_llm_prices: Record<string, unknown> }>)
    .insertInto('trace_llm_prices')
    .values(
      DEFAULT_PRICES.map((price, i) => ({
        // Fixed ids, so that every database seeds the same rows.
        id: `default-${String(i + 1).padStart(4, '0')}`,
        pricing_level: 'default',
        pricing_level_id: 'default',
        provider_id: price.provider,
        llm_id: price.llm,
        effective_date: DEFAULT_PRICES_DATE,
        prompt_token_cost: price.promptPerMillion / 1e6,
        completion_token_cost: price.completionPerMillion / 1e6,
        prompt_token_cost_unit: 'USD',
        completion_token_cost_unit: 'USD',
        created_by: 'system',
      })),
    )
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('trace_llm_prices').execute();
  await db.schema.dropTable('trace_feedback').execute();
}
