import { sql, type Kysely } from 'kysely';

/**
 * Whether a feedback's payload holds numbers a double would change (docs/tracing.md, "Exact numbers in
 * calls"): such payloads are read as JSON text and parsed keeping them, every other one as JSON.parse
 * reads it. Rows written before this migration went through JSON.parse, so false is right for all of
 * them: a float from 1e21 up that JSONB spelled out as digits then still reads back as a float.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('trace_feedback').addColumn('exact_numbers', 'boolean', (c) => c.notNull().defaultTo(sql`false`)).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('trace_feedback').dropColumn('exact_numbers').execute();
}
