import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';

/**
 * Read-only queries on the training tables (owned by src/training/): the router's view of trained
 * models and their checkpoints. Always scoped by entity name, which is how clients name models.
 */

export interface TrainedModel {
  id: string;
  entity: string;
  project: string;
  name: string;
  baseModel: string;
}

export interface StoredCheckpoint {
  /** Unique per checkpoint row: a model re-created under a deleted one's name gets new ones. */
  id: string;
  step: number;
  uri: string;
}

/** A live model by its `entity/project/name`; the caller has already checked that it reaches `entity`. */
export async function findTrainedModel(
  db: Kysely<Database>,
  args: { entity: string; project: string; name: string },
): Promise<TrainedModel | undefined> {
  const row = await db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .select(['m.id', 'e.name as entity', 'm.project', 'm.name', 'm.base_model'])
    .where('e.name', '=', args.entity)
    .where('m.project', '=', args.project)
    .where('m.name', '=', args.name)
    .where('m.deleted_at', 'is', null)
    .executeTakeFirst();
  return row && { id: row.id, entity: row.entity, project: row.project, name: row.name, baseModel: row.base_model };
}

/** The largest step the `integer` column holds; a larger one cannot exist. */
export const MAX_STEP = 2_147_483_647;

/** The checkpoint at `step`, or the latest one when step is 'latest'. */
export async function findCheckpoint(
  db: Kysely<Database>,
  args: { modelId: string; step: number | 'latest' },
): Promise<StoredCheckpoint | undefined> {
  if (args.step !== 'latest' && args.step > MAX_STEP) return undefined;
  let query = db.selectFrom('checkpoints').select(['id', 'step', 'uri']).where('model_id', '=', args.modelId);
  query = args.step === 'latest' ? query.orderBy('step', 'desc').limit(1) : query.where('step', '=', args.step);
  return query.executeTakeFirst();
}

/** Whether the model still has this checkpoint (the primary key decides; the model scopes it). */
export async function checkpointExists(db: Kysely<Database>, args: { modelId: string; checkpointId: string }): Promise<boolean> {
  const row = await db.selectFrom('checkpoints').select('id').where('id', '=', args.checkpointId).where('model_id', '=', args.modelId).executeTakeFirst();
  return row !== undefined;
}

export interface NamedModel {
  entity: string;
  project: string;
  name: string;
}

/**
 * Every model row with one of these names, deleted ones included, each with its checkpoints at these
 * steps (each at most MAX_STEP; none: one row with `checkpoint` null): which adapters named after them
 * can still be served.
 */
export async function checkpointsOfNamedModels(
  db: Kysely<Database>,
  args: { models: readonly NamedModel[]; steps: readonly number[] },
): Promise<(NamedModel & { checkpoint: { id: string; step: number } | null })[]> {
  if (args.models.length === 0 || args.steps.length === 0) return [];
  const rows = await db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .leftJoin('checkpoints as c', (join) => join.onRef('c.model_id', '=', 'm.id').on('c.step', 'in', [...args.steps]))
    .select(['e.name as entity', 'm.project', 'm.name', 'c.id as checkpoint_id', 'c.step'])
    .where((eb) => eb.or(args.models.map((m) => eb.and([eb('e.name', '=', m.entity), eb('m.project', '=', m.project), eb('m.name', '=', m.name)]))))
    .execute();
  return rows.map((row) => ({
    entity: row.entity,
    project: row.project,
    name: row.name,
    checkpoint: row.checkpoint_id === null || row.step === null ? null : { id: row.checkpoint_id, step: row.step },
  }));
}

export interface ListedCheckpoint {
  entity: string;
  project: string;
  name: string;
  baseModel: string;
  modelCreatedAt: Date;
  /** Null for a model with no checkpoint yet. */
  step: number | null;
  checkpointCreatedAt: Date | null;
}

/** Every live model of the given entities with each of its checkpoints (one row with a null step when it has none). */
export async function listCheckpoints(db: Kysely<Database>, args: { entities: readonly string[] }): Promise<ListedCheckpoint[]> {
  if (args.entities.length === 0) return [];
  const rows = await db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .leftJoin('checkpoints as c', 'c.model_id', 'm.id')
    .select(['e.name as entity', 'm.project', 'm.name', 'm.base_model', 'm.created_at', 'c.step', 'c.created_at as checkpoint_created_at'])
    .where('e.name', 'in', [...args.entities])
    .where('m.deleted_at', 'is', null)
    .orderBy('e.name')
    .orderBy('m.project')
    .orderBy('m.name')
    .orderBy('c.step')
    .execute();
  return rows.map((row) => ({
    entity: row.entity,
    project: row.project,
    name: row.name,
    baseModel: row.base_model,
    modelCreatedAt: row.created_at,
    step: row.step,
    checkpointCreatedAt: row.checkpoint_created_at,
  }));
}
