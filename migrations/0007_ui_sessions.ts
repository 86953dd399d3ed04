import { sql, type Kysely } from 'kysely';

/** Browser sessions of the web UI: an API key exchanged for a cookie (docs/ui.md). Only the token's hash is stored. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('ui_sessions')
    .addColumn('token_hash', 'text', (c) => c.primaryKey())
    .addColumn('api_key_id', 'uuid', (c) => c.notNull().references('api_keys.id').onDelete('cascade'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('ui_sessions_key_idx').on('ui_sessions').column('api_key_id').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('ui_sessions').execute();
}
