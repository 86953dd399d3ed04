import { sql, type Kysely } from 'kysely';

/**
 * The model and step of the deleted checkpoint whose storage a release names, so that a release is not
 * listed to workers while a job of that model trains the same step again (a worker writes per model and
 * step, into the same directory). Existing releases have neither and are listed as before.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table checkpoint_releases add column model_id uuid, add column step integer`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table checkpoint_releases drop column model_id, drop column step`.execute(db);
}
