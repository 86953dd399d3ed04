import { sql } from 'kysely';
import type { StoredCheckpoint as CheckpointRef } from '../inference/checkpoints.js';
import type { ArtifactRow, CollectionRow, Executor } from './repository.js';

/**
 * Queries behind checkpoints as `lora` artifacts: a model's checkpoints page by page, and the W&B rows kept
 * per checkpoint (models and single checkpoints are found with the router's queries, src/inference/checkpoints.ts).
 * Callers check that the key reaches the entity.
 */

export type { StoredCheckpoint as CheckpointRef, TrainedModel as CheckpointModel } from '../inference/checkpoints.js';

/** A page of the model's checkpoints, newest first, and how many it has. */
export async function listCheckpointsOf(db: Executor, args: { modelId: string; offset: number; limit: number }): Promise<{ rows: CheckpointRef[]; total: number }> {
  const rows = await db
    .selectFrom('checkpoints')
    .select(['id', 'step', 'uri'])
    .where('model_id', '=', args.modelId)
    .orderBy('step', 'desc')
    .offset(args.offset)
    .limit(args.limit)
    .execute();
  const { total } = await db
    .selectFrom('checkpoints')
    .select((eb) => eb.fn.countAll<number>().as('total'))
    .where('model_id', '=', args.modelId)
    .executeTakeFirstOrThrow();
  return { rows, total: Number(total) };
}

export async function checkpointArtifact(db: Executor, args: { checkpointId: string }): Promise<ArtifactRow | undefined> {
  return db.selectFrom('wandb_artifacts').selectAll().where('checkpoint_id', '=', args.checkpointId).executeTakeFirst();
}

export interface CheckpointFileRow {
  name: string;
  md5: string;
  size: number;
  stat: string;
  token: string;
}

export async function checkpointFiles(db: Executor, args: { artifactId: number }): Promise<CheckpointFileRow[]> {
  const rows = await db.selectFrom('wandb_artifact_files').select(['name', 'md5', 'size', 'stat', 'token']).where('artifact_id', '=', args.artifactId).execute();
  return rows.map((r) => ({ name: r.name, md5: r.md5, size: Number(r.size ?? 0), stat: r.stat ?? '', token: r.token }));
}

/**
 * Makes or refreshes the W&B row of a checkpoint: version `v<step>`, COMMITTED, with these files. The row
 * of another checkpoint that holds that version number (one of an earlier model of the same name, deleted,
 * then registered again) leaves the collection first. A plain artifact (checkpoint_id null) is never
 * deleted here: `moveLegacyVersions` takes those out of a model's collection before its versions are read.
 * Several statements: run it in a transaction.
 */
export async function putCheckpointArtifact(
  db: Executor,
  args: { collectionId: number; checkpoint: CheckpointRef; digest: string; size: number; manifestToken: string; files: CheckpointFileRow[] },
): Promise<ArtifactRow> {
  await db
    .deleteFrom('wandb_artifacts')
    .where('collection_id', '=', args.collectionId)
    .where('version_index', '=', args.checkpoint.step)
    .where('checkpoint_id', 'is not', null)
    .where('checkpoint_id', '!=', args.checkpoint.id)
    .execute();
  const values = { digest: args.digest, size: args.size, file_count: args.files.length, updated_at: new Date() };
  const row = await db
    .insertInto('wandb_artifacts')
    .values({
      collection_id: args.collectionId,
      version_index: args.checkpoint.step,
      state: 'COMMITTED',
      description: null,
      metadata: null,
      run_name: null,
      storage_region: null,
      manifest_token: args.manifestToken,
      manifest_md5: null,
      manifest_expected_md5: null,
      checkpoint_id: args.checkpoint.id,
      ...values,
    })
    .onConflict((c) => c.column('checkpoint_id').doUpdateSet(values))
    .returningAll()
    .executeTakeFirstOrThrow();
  await db.deleteFrom('wandb_artifact_files').where('artifact_id', '=', row.id).execute();
  if (args.files.length) {
    await db
      .insertInto('wandb_artifact_files')
      .values(args.files.map((f) => ({ artifact_id: row.id, name: f.name, md5: f.md5, size: f.size, stat: f.stat, token: f.token, birth_artifact_id: row.id })))
      .execute();
  }
  return row;
}

/** Turns a pushed, uploaded artifact into the W&B row of the checkpoint it became. */
export async function attachCheckpoint(db: Executor, args: { artifactId: number; checkpoint: CheckpointRef; size: number; files: { name: string; size: number; stat: string }[] }): Promise<void> {
  await db
    .updateTable('wandb_artifacts')
    .set({ state: 'COMMITTED', version_index: args.checkpoint.step, checkpoint_id: args.checkpoint.id, size: args.size, file_count: args.files.length, pending_aliases: [], updated_at: new Date() })
    .where('id', '=', args.artifactId)
    .execute();
  for (const file of args.files) {
    await db.updateTable('wandb_artifact_files').set({ size: file.size, stat: file.stat }).where('artifact_id', '=', args.artifactId).where('name', '=', file.name).execute();
  }
}

/** For each checkpoint artifact among these: its step, and whether it is its model's newest checkpoint. */
export async function checkpointSteps(db: Executor, args: { artifactIds: number[] }): Promise<Map<number, { step: number; latest: boolean }>> {
  if (args.artifactIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('wandb_artifacts as a')
    .innerJoin('checkpoints as c', 'c.id', 'a.checkpoint_id')
    .select(['a.id', 'c.step'])
    .select(sql<boolean>`c.step = (select max(step) from checkpoints l where l.model_id = c.model_id)`.as('latest'))
    .where('a.id', 'in', args.artifactIds)
    .execute();
  return new Map(rows.map((r) => [Number(r.id), { step: r.step, latest: Boolean(r.latest) }]));
}

/** Whether the checkpoint still exists and its model is live. */
export async function checkpointIsLive(db: Executor, args: { checkpointId: string }): Promise<boolean> {
  const row = await db
    .selectFrom('checkpoints as c')
    .innerJoin('models as m', 'm.id', 'c.model_id')
    .select('c.id')
    .where('c.id', '=', args.checkpointId)
    .where('m.deleted_at', 'is', null)
    .executeTakeFirst();
  return row !== undefined;
}

/** A file of a live model's checkpoint by the token of its download URL, with where it is read from. */
export async function findCheckpointFileByToken(db: Executor, args: { token: string }): Promise<{ name: string; stat: string | null; uri: string } | undefined> {
  return db
    .selectFrom('wandb_artifact_files as f')
    .innerJoin('wandb_artifacts as a', 'a.id', 'f.artifact_id')
    .innerJoin('checkpoints as c', 'c.id', 'a.checkpoint_id')
    .innerJoin('models as m', 'm.id', 'c.model_id')
    .select(['f.name', 'f.stat', 'c.uri'])
    .where('f.token', '=', args.token)
    .where('m.deleted_at', 'is', null)
    .executeTakeFirst();
}

/**
 * Serializes, per entity and until the transaction ends, what stores a blob and then names it (a run
 * file or a manifest uploaded again) and what deletes the blobs nothing names: otherwise a delete could
 * take a blob between another upload's store and its reference to it.
 */
export async function lockEntityBlobs(db: Executor, entity: string): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtextextended(${`wandb-blobs:${entity}`}, 0))`.execute(db);
}

/**
 * Drops these blobs of an entity where nothing references them any more: no stored artifact's file or
 * manifest and no run file. A pushed checkpoint's bytes are blobs only until they are written to its
 * directory. Run it in a transaction, after any row lock the transaction takes (it takes lockEntityBlobs
 * last, as every caller does, so that no two transactions wait on each other).
 */
export async function deleteUnreferencedBlobs(db: Executor, args: { entity: string; md5s: string[] }): Promise<void> {
  if (args.md5s.length === 0) return;
  await lockEntityBlobs(db, args.entity);
  // Artifact files hold base64 MD5s, blobs hex ones.
  await sql`
    delete from wandb_blobs b where b.entity = ${args.entity} and b.md5 in (${sql.join(args.md5s)})
    and not exists (
      select 1 from wandb_artifact_files f join wandb_artifacts a on a.id = f.artifact_id join wandb_collections k on k.id = a.collection_id
      where k.entity = b.entity and a.checkpoint_id is null and encode(decode(f.md5, 'base64'), 'hex') = b.md5)
    and not exists (
      select 1 from wandb_artifacts a join wandb_collections k on k.id = a.collection_id where k.entity = b.entity and a.manifest_md5 = b.md5)
    and not exists (
      select 1 from wandb_run_files r join wandb_runs u on u.id = r.run_id where u.entity = b.entity and r.md5 = b.md5)`.execute(db);
}

/** Whether a collection holds committed plain artifacts: versions that are no checkpoint's. */
export async function holdsPlainVersions(db: Executor, args: { collectionId: number }): Promise<boolean> {
  return (await plainVersions(db, args.collectionId).limit(1).executeTakeFirst()) !== undefined;
}

function plainVersions(db: Executor, collectionId: number) {
  return db.selectFrom('wandb_artifacts').select('id').where('collection_id', '=', collectionId).where('checkpoint_id', 'is', null).where('state', '=', 'COMMITTED');
}

/**
 * Moves the committed plain artifacts of a model's `lora` collection, with their version numbers, aliases,
 * files and manifests, into a new `lora` collection `<name>-legacy` (`-legacy-2`, `-3`… when a collection or
 * a model already has that name), where they are served as stored. They are `lora` artifacts an earlier
 * release stored under the name (migration 0019 moves those at the upgrade), or versions pushed to the name
 * while no live model had it. Locks the collection row: run it in a transaction.
 */
export async function moveLegacyVersions(db: Executor, args: { collection: CollectionRow }): Promise<void> {
  const { collection } = args;
  await db.selectFrom('wandb_collections').select('id').where('id', '=', collection.id).forUpdate().execute();
  if (!(await holdsPlainVersions(db, { collectionId: collection.id }))) return;
  const legacy = plainVersions(db, collection.id);
  let name = legacyName(collection.name, 1);
  for (let n = 2; await nameTaken(db, { ...collection, name }); n++) name = legacyName(collection.name, n);
  const moved = await db
    .insertInto('wandb_collections')
    .values({ entity: collection.entity, project: collection.project, name, type: collection.type })
    .returning('id')
    .executeTakeFirstOrThrow();
  await db.updateTable('wandb_aliases').set({ collection_id: moved.id }).where('artifact_id', 'in', legacy).execute();
  await db.updateTable('wandb_artifacts').set({ collection_id: moved.id }).where('id', 'in', legacy).execute();
}

/** `<name>-legacy` (`-legacy-<n>` from 2), the name cut so that the whole stays a W&B name (at most 128 characters). */
function legacyName(name: string, n: number): string {
  const suffix = n === 1 ? '-legacy' : `-legacy-${n}`;
  return name.slice(0, 128 - suffix.length) + suffix;
}

async function nameTaken(db: Executor, args: { entity: string; project: string; name: string }): Promise<boolean> {
  const collection = await db
    .selectFrom('wandb_collections')
    .select('id')
    .where('entity', '=', args.entity)
    .where('project', '=', args.project)
    .where('name', '=', args.name)
    .executeTakeFirst();
  if (collection) return true;
  const model = await db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .select('m.id')
    .where('e.name', '=', args.entity)
    .where('m.project', '=', args.project)
    .where('m.name', '=', args.name)
    .executeTakeFirst();
  return model !== undefined;
}

export async function deleteArtifact(db: Executor, args: { artifactId: number }): Promise<void> {
  await db.deleteFrom('wandb_artifacts').where('id', '=', args.artifactId).execute();
}
