import { sql } from 'kysely';
import type { PageOf } from '../schemas.js';
import { isUuid, toPage, type EntityScope, type TrainingDb } from './db.js';
import { forgetModelDeletedCheckpoints } from './deleted.js';
import { cancelModelJobs } from './jobs.js';
import { recordReleases } from './retention.js';
import { toModel, type DeletedCheckpoint, type StoredModel } from './rows.js';

function liveModels(db: TrainingDb, { entityIds }: EntityScope) {
  return db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .selectAll('m')
    .select('e.name as entity')
    .where('m.deleted_at', 'is', null)
    .where('m.entity_id', 'in', [...entityIds]);
}

/** Creates the model, or returns undefined when a live model already has this (entity, project, name). */
export async function createModel(
  db: TrainingDb,
  args: { entityId: string; project: string; name: string; baseModel: string },
): Promise<StoredModel | undefined> {
  const inserted = await db
    .insertInto('models')
    .values({
      id: crypto.randomUUID(),
      entity_id: args.entityId,
      project: args.project,
      name: args.name,
      base_model: args.baseModel,
      run_id: null,
      deleted_at: null,
    })
    .onConflict((oc) => oc.columns(['entity_id', 'project', 'name']).where('deleted_at', 'is', null).doNothing())
    .returning('id')
    .executeTakeFirst();
  if (!inserted) return undefined;
  return findModel(db, { entityIds: [args.entityId], modelId: inserted.id });
}

/**
 * How a transaction holds the model row it reads, until it ends:
 * - `share`: writers of the model's jobs, logs and metrics, so that a delete waits for them (and they for
 *   it: a model deleted while they waited is not found);
 * - `delete`: the delete itself. FOR NO KEY UPDATE conflicts with `share` and with another delete, but not
 *   with the key-share lock a foreign key check takes, so a job completing (inserting its checkpoint)
 *   while the model is deleted cannot deadlock with the delete.
 * PGlite has one connection; the locks are harmless there.
 */
export type ModelLock = 'share' | 'delete';

export async function findModel(
  db: TrainingDb,
  args: EntityScope & { modelId: string; lock?: ModelLock },
): Promise<StoredModel | undefined> {
  if (args.entityIds.length === 0 || !isUuid(args.modelId)) return undefined;
  let query = liveModels(db, args).where('m.id', '=', args.modelId);
  if (args.lock === 'share') query = query.forShare('m');
  if (args.lock === 'delete') query = query.forNoKeyUpdate('m');
  const row = await query.executeTakeFirst();
  return row && toModel(row);
}

/** The id of a deleted model the caller reaches, else undefined (a retried DELETE answers as the first). */
export async function findDeletedModelId(db: TrainingDb, args: EntityScope & { modelId: string }): Promise<string | undefined> {
  if (args.entityIds.length === 0 || !isUuid(args.modelId)) return undefined;
  const row = await db
    .selectFrom('models')
    .select('id')
    .where('id', '=', args.modelId)
    .where('entity_id', 'in', [...args.entityIds])
    .where('deleted_at', 'is not', null)
    .executeTakeFirst();
  return row?.id;
}

export async function findModelByName(
  db: TrainingDb,
  args: EntityScope & { entityId: string; project: string; name: string },
): Promise<StoredModel | undefined> {
  if (!args.entityIds.includes(args.entityId)) return undefined;
  const row = await liveModels(db, args)
    .where('m.entity_id', '=', args.entityId)
    .where('m.project', '=', args.project)
    .where('m.name', '=', args.name)
    .executeTakeFirst();
  return row && toModel(row);
}

/**
 * Models in creation order. `after` is a model id from an earlier page, deleted since or not (a listing goes
 * on past a model deleted meanwhile); undefined is returned when it is no model of the caller's entities, for
 * the service to answer 422.
 */
export async function listModels(
  db: TrainingDb,
  args: EntityScope & { entityId?: string; project?: string; after?: string; limit: number },
): Promise<PageOf<StoredModel> | undefined> {
  if (args.entityIds.length === 0) return args.after === undefined ? toPage([], args.limit) : undefined;
  let query = liveModels(db, args);
  if (args.after !== undefined) {
    const cursor =
      isUuid(args.after) &&
      (await db.selectFrom('models').select('id').where('id', '=', args.after).where('entity_id', 'in', [...args.entityIds]).executeTakeFirst());
    if (!cursor) return undefined;
    // Compared in SQL: timestamptz keeps microseconds that a JS Date would drop.
    query = query.where(sql<boolean>`(m.created_at, m.id) > (select created_at, id from models where id = ${cursor.id})`);
  }
  if (args.entityId !== undefined) query = query.where('m.entity_id', '=', args.entityId);
  if (args.project !== undefined) query = query.where('m.project', '=', args.project);
  const rows = await query.orderBy('m.created_at').orderBy('m.id').limit(args.limit + 1).execute();
  return toPage(rows.map(toModel), args.limit);
}

/** The step a log call records at: the latest checkpoint's, or 0 before the first training step. */
export async function currentStep(db: TrainingDb, { model }: { model: StoredModel }): Promise<number> {
  const row = await db
    .selectFrom('checkpoints')
    .select((eb) => eb.fn.max('step').as('step'))
    .where('model_id', '=', model.id)
    .executeTakeFirst();
  return row?.step ?? 0;
}

/**
 * Deletes a model: the row is kept, marked deleted, so that its jobs stay readable; its checkpoints (and
 * the ids of deleted ones kept as page cursors), logged trajectories and metrics go; queued jobs are canceled and running ones asked to stop. Several statements:
 * run it in a transaction, on a model read with the `delete` lock.
 *
 * The jobs come first: flagging them locks their rows, so a worker's complete in flight either commits
 * first (and its checkpoint, visible to the next statement, is deleted and reported here) or waits and then
 * finds the cancel (and registers no checkpoint). Deleting the checkpoints first would miss one committed
 * between the two statements and leave it behind, unreported.
 */
export async function deleteModel(
  db: TrainingDb,
  { model }: { model: StoredModel },
): Promise<{ deleted_checkpoints: number; deleted: DeletedCheckpoint[] }> {
  await db.updateTable('models').set({ deleted_at: new Date() }).where('id', '=', model.id).execute();
  await cancelModelJobs(db, { modelId: model.id });
  const deleted = await db.deleteFrom('checkpoints').where('model_id', '=', model.id).returning(['id', 'step', 'uri', 'source']).execute();
  await recordReleases(db, { model, checkpoints: deleted, reason: 'deleted' });
  await forgetModelDeletedCheckpoints(db, { model });
  await db.deleteFrom('trajectory_logs').where('model_id', '=', model.id).execute();
  await db.deleteFrom('metric_history').where('model_id', '=', model.id).execute();
  return { deleted_checkpoints: deleted.length, deleted };
}

/** Entity ids by name, for the names a key reaches (principals carry names; rows carry ids). */
export async function findEntityIds(db: TrainingDb, args: { names: readonly string[] }): Promise<Map<string, string>> {
  if (args.names.length === 0) return new Map();
  const rows = await db.selectFrom('entities').select(['id', 'name']).where('name', 'in', [...args.names]).execute();
  return new Map(rows.map((row) => [row.name, row.id]));
}
