import { sql, type Kysely } from 'kysely';

/** Inference: per-request usage records (src/inference/tables.ts). */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('usage_records')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull())
    .addColumn('entity', 'text', (c) => c.notNull())
    .addColumn('project', 'text', (c) => c.notNull())
    .addColumn('api_key_id', 'uuid', (c) => c.notNull())
    .addColumn('request_id', 'text', (c) => c.notNull())
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('base_model', 'text')
    .addColumn('trained_model', 'text')
    .addColumn('checkpoint_step', 'integer')
    .addColumn('backend', 'text')
    .addColumn('stream', 'boolean', (c) => c.notNull())
    .addColumn('prompt_tokens', 'integer', (c) => c.notNull())
    .addColumn('completion_tokens', 'integer', (c) => c.notNull())
    .addColumn('cached_tokens', 'integer', (c) => c.notNull())
    .addColumn('estimated', 'boolean', (c) => c.notNull())
    .addColumn('latency_ms', 'integer', (c) => c.notNull())
    .addColumn('time_to_first_token_ms', 'integer')
    .addColumn('outcome', 'text', (c) => c.notNull().check(sql`outcome in ('success', 'error', 'client_disconnected')`))
    .addColumn('status', 'integer', (c) => c.notNull())
    .addColumn('error_code', 'text')
    .execute();
  // GET /v1/usage reads one project over a time range.
  await db.schema.createIndex('usage_records_project_idx').on('usage_records').columns(['entity', 'project', 'created_at']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('usage_records').execute();
}
