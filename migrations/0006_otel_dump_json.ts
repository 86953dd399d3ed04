import { sql, type Kysely } from 'kysely';

/**
 * The whole OTel span kept with each call (`otel_dump`) is only ever returned, never queried: store it
 * as `json` (validated text) rather than `jsonb`, which PostgreSQL would parse into its binary form on
 * every insert. It is the largest column of an OTel call, so this is most of the ingest's parsing work.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table trace_calls alter column otel_dump type json using otel_dump::json`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table trace_calls alter column otel_dump type jsonb using otel_dump::jsonb`.execute(db);
}
