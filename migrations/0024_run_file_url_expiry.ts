import { sql, type Kysely } from 'kysely';

/**
 * A run file's upload URL ends a day after it was last handed out (createRunFiles hands out the same
 * token again, moving the end), so that a URL copied from a log, or held by a key since revoked, stops
 * taking bytes. Rows from before get their day from now.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table wandb_run_files add column upload_expires_at timestamptz not null default now() + interval '1 day'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table wandb_run_files drop column upload_expires_at`.execute(db);
}
