import { sql, type Kysely } from 'kysely';

/**
 * Whether a call's payloads may hold integers beyond 2^53 (docs/tracing.md, "Integers beyond 2^53 in
 * calls are exact"): such rows are read as JSON text and parsed keeping those digits, every other row
 * as the driver parses JSONB. Rows written before this migration went through JSON.parse, so none of
 * them can hold such an integer: false is right for all of them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('trace_calls').addColumn('long_integers', 'boolean', (c) => c.notNull().defaultTo(sql`false`)).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('trace_calls').dropColumn('long_integers').execute();
}
