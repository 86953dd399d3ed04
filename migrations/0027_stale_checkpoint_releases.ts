import { sql, type Kysely } from 'kysely';

/**
 * Storage releases that older releases left behind. Before a release was dropped when its storage was
 * registered again (a deleted step trained again: the worker writes `<output-dir>/<model id>/step-<N>`
 * again), such releases stayed listed while a live checkpoint named their storage, and the current
 * trainyard-worker deletes every listed release under its output directory: the live adapter with it.
 *
 * - Releases whose storage a checkpoint names (`dir` and `dir/` are the same storage, as
 *   `storageForms` in src/training/repository/retention.ts has it) are deleted: that storage is in use.
 * - Releases recorded before 0026 get the model and step their URI names in the worker's layout (as a path
 *   or a file:// URL, when the model is the release's entity's), so that they too are not listed while a
 *   job of that model trains the step again. Others keep neither and are listed as before.
 *
 * Down reverts nothing: the deleted rows named live storage, and the model and step are right either way.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const key = sql`(case when right(r.uri, 1) = '/' then left(r.uri, -1) else r.uri end)`;
  await sql`
    delete from checkpoint_releases r
    where exists (select 1 from checkpoints c where c.uri in (${key}, ${key} || '/'))`.execute(db);

  const layout = sql.lit('/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})/step-(0|[1-9][0-9]{0,8})/?$');
  await sql`
    update checkpoint_releases r
    set model_id = m.id, step = named.step
    from (
      select id, parts[1]::uuid as model_id, parts[2]::integer as step
      from (select id, regexp_match(uri, ${layout}) as parts from checkpoint_releases where model_id is null) matched
      where parts is not null
    ) named
    join models m on m.id = named.model_id
    where r.id = named.id and m.entity_id = r.entity_id`.execute(db);
}

export async function down(): Promise<void> {}
