import { sql, type Kysely } from 'kysely';

/**
 * `lora` artifacts pushed before 0014 were stored as plain artifacts (checkpoint_id null). Since 0014 a
 * `lora` collection named after a live model serves that model's checkpoints as its versions, which hid
 * those artifacts and let a lookup of a checkpoint replace the one holding its version number. This moves
 * the committed plain artifacts of every such collection, keeping their version numbers, aliases, files
 * and manifests (which hang off the artifact row), into a new `lora` collection `<name>-legacy` of the same
 * project (`-legacy-2`, `-legacy-3`… when a collection or a model has that name), served as stored. A
 * collection no live model is named after keeps its artifacts: it is served as stored (src/wandb).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const { rows } = await sql<{ id: string; entity: string; project: string; name: string }>`
    select k.id, k.entity, k.project, k.name from wandb_collections k
    where k.type = 'lora'
      and exists (
        select 1 from models m join entities e on e.id = m.entity_id
        where e.name = k.entity and m.project = k.project and m.name = k.name and m.deleted_at is null)
      and exists (select 1 from wandb_artifacts a where a.collection_id = k.id and a.checkpoint_id is null and a.state = 'COMMITTED')
    order by k.id`.execute(db);
  for (const collection of rows) {
    let name = legacyName(collection.name, 1);
    for (let n = 2; await nameTaken(db, { ...collection, name }); n++) name = legacyName(collection.name, n);
    const { rows: created } = await sql<{ id: string }>`
      insert into wandb_collections (entity, project, name, type)
      values (${collection.entity}, ${collection.project}, ${name}, 'lora') returning id`.execute(db);
    const legacy = sql`select id from wandb_artifacts where collection_id = ${collection.id} and checkpoint_id is null and state = 'COMMITTED'`;
    await sql`update wandb_aliases set collection_id = ${created[0].id} where artifact_id in (${legacy})`.execute(db);
    await sql`update wandb_artifacts set collection_id = ${created[0].id} where id in (${legacy})`.execute(db);
  }
}

/** `<name>-legacy` (`-legacy-<n>` from 2), the name cut so that the whole stays within W&B names' 128 characters. */
function legacyName(name: string, n: number): string {
  const suffix = n === 1 ? '-legacy' : `-legacy-${n}`;
  return name.slice(0, 128 - suffix.length) + suffix;
}

async function nameTaken(db: Kysely<unknown>, args: { entity: string; project: string; name: string }): Promise<boolean> {
  const { rows } = await sql`
    select 1 from wandb_collections where entity = ${args.entity} and project = ${args.project} and name = ${args.name}
    union all
    select 1 from models m join entities e on e.id = m.entity_id where e.name = ${args.entity} and m.project = ${args.project} and m.name = ${args.name}`.execute(db);
  return rows.length > 0;
}

/**
 * Nothing to undo in the schema. The moved artifacts stay in their `-legacy` collections: moving them back
 * would put them under the checkpoints' version numbers again.
 */
export async function down(): Promise<void> {}
