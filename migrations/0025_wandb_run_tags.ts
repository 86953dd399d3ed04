import { sql, type Kysely } from 'kysely';

/**
 * What wandb.init(tags=, notes=, group=) and the public API's run.update() set on a run, and the tags
 * of an artifact version (run.log_artifact(a, tags=...), artifact.tags + artifact.save()): kept and
 * answered instead of dropped. Existing rows get no tags, no notes and no group.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table wandb_runs add column tags text[] not null default '{}', add column notes text, add column group_name text`.execute(db);
  await sql`alter table wandb_artifacts add column tags text[] not null default '{}'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table wandb_artifacts drop column tags`.execute(db);
  await sql`alter table wandb_runs drop column tags, drop column notes, drop column group_name`.execute(db);
}
