import type { Kysely } from 'kysely';

/**
 * `trace_calls.long_integers` becomes `exact_numbers`: a call's payloads may now also hold whole-valued
 * floats that JSON.parse would turn into integers (docs/tracing.md, "Exact numbers in calls"), and such
 * rows are read as JSON text the same way. A row flagged before held long integers, which is still
 * true; a row not flagged was written through JSON.parse, so it holds neither.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('trace_calls').renameColumn('long_integers', 'exact_numbers').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('trace_calls').renameColumn('exact_numbers', 'long_integers').execute();
}
