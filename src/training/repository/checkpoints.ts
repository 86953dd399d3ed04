import { sql } from 'kysely';
import type { DeleteCheckpointsResponse, PageOf } from '../schemas.js';
import { isUuid, jsonb, lockClaims, toPage, type TrainingDb } from './db.js';
import { cursorStep, rememberDeletedCheckpoints } from './deleted.js';
import { stepsInUse } from './in-use.js';
import { recordReleases } from './retention.js';
import { toCheckpoint, type DeletedCheckpoint, type StoredCheckpoint, type StoredModel } from './rows.js';

/**
 * A page of the model's checkpoints ordered by step. `after` is a checkpoint id of this model, also one
 * deleted since the client read it (repository/deleted.ts); undefined is returned when it was never one,
 * for the service to answer 422 (a cursor the client made up is its error).
 */
export async function listCheckpoints(
  db: TrainingDb,
  args: { model: StoredModel; after?: string; limit: number; order: 'asc' | 'desc' },
): Promise<PageOf<StoredCheckpoint> | undefined> {
  let query = db.selectFrom('checkpoints').selectAll().where('model_id', '=', args.model.id);
  if (args.after !== undefined) {
    const step = await cursorStep(db, { model: args.model, after: args.after });
    if (step === undefined) return undefined;
    query = query.where('step', args.order === 'asc' ? '>' : '<', step);
  }
  const rows = await query.orderBy('step', args.order).limit(args.limit + 1).execute();
  return toPage(rows.map(toCheckpoint), args.limit);
}

export async function findCheckpoint(
  db: TrainingDb,
  args: { model: StoredModel; checkpointId: string },
): Promise<StoredCheckpoint | undefined> {
  if (!isUuid(args.checkpointId)) return undefined;
  const row = await db
    .selectFrom('checkpoints')
    .selectAll()
    .where('model_id', '=', args.model.id)
    .where('id', '=', args.checkpointId)
    .executeTakeFirst();
  return row && toCheckpoint(row);
}

/**
 * The model's best checkpoint by a metric, among those with a number for it (what ART's
 * delete_checkpoints keeps); ties go to the later step, as retention ranks them.
 */
export async function bestCheckpoint(
  db: TrainingDb,
  args: { model: Pick<StoredModel, 'id'>; metric: string; mode: 'max' | 'min' },
): Promise<{ id: string; step: number; value: number } | undefined> {
  const direction = args.mode === 'max' ? sql`desc` : sql`asc`;
  const { rows } = await sql<{ id: string; step: number; value: number }>`
    select id, step, (metrics ->> ${args.metric})::float8 as value from checkpoints
    where model_id = ${args.model.id} and jsonb_typeof(metrics -> ${args.metric}) = 'number'
    order by value ${direction}, step desc
    limit 1`.execute(db);
  return rows[0];
}

export async function latestCheckpoint(db: TrainingDb, args: { model: Pick<StoredModel, 'id'> }): Promise<StoredCheckpoint | undefined> {
  const row = await db
    .selectFrom('checkpoints')
    .selectAll()
    .where('model_id', '=', args.model.id)
    .orderBy('step', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row && toCheckpoint(row);
}

/**
 * Deletes checkpoints by step, sparing pinned ones (reported in `pinned_steps`): a pin protects a
 * checkpoint from clients that delete every step but the ones they think best; and sparing the checkpoints
 * that queued or running jobs need (reported in `in_use_steps`; repository/in-use.ts): a running job's base
 * checkpoint, which its trainer is reading, and a job's KL reference: retention keeps them for the same
 * reason, and their storage would otherwise be released (an imported one's files are removed right after
 * the commit). The claim lock is held, so no job starts from a step while it is being
 * deleted. The deleted ids stay page cursors for a while (repository/deleted.ts). `deleted` names what
 * went, for the inference router to unload adapters and the storage to be released. The steps travel as
 * one array parameter (a request may name 100,000). Several statements: run it in a transaction.
 */
export async function deleteCheckpoints(
  db: TrainingDb,
  args: { model: StoredModel; steps: readonly number[] },
): Promise<DeleteCheckpointsResponse & { deleted: DeletedCheckpoint[] }> {
  const steps = [...new Set(args.steps)];
  if (steps.length === 0) return { deleted_count: 0, not_found_steps: [], pinned_steps: [], in_use_steps: [], deleted: [] };
  await lockClaims(db);
  const requested = sql<boolean>`step = any(${steps}::int4[])`;
  const inUse = sql<boolean>`step in (${stepsInUse(args.model.id)})`;
  const deletedRows = await db
    .deleteFrom('checkpoints')
    .where('model_id', '=', args.model.id)
    .where(requested)
    .where('pinned', '=', false)
    .where(sql<boolean>`not ${inUse}`)
    .returning(['id', 'step', 'uri', 'source'])
    .execute();
  await rememberDeletedCheckpoints(db, { model: args.model, checkpoints: deletedRows });
  const deleted = deletedRows.map(({ id, step, uri, source }) => ({ id, step, uri, source }));
  const spared = await db
    .selectFrom('checkpoints')
    .select(['step', 'pinned', inUse.as('in_use')])
    .where('model_id', '=', args.model.id)
    .where(requested)
    .orderBy('step')
    .execute();
  await recordReleases(db, { model: args.model, checkpoints: deleted, reason: 'deleted' });
  const found = new Set([...deleted, ...spared].map((row) => row.step));
  return {
    deleted_count: deleted.length,
    not_found_steps: steps.filter((step) => !found.has(step)),
    pinned_steps: spared.filter((row) => row.pinned).map((row) => row.step),
    in_use_steps: spared.filter((row) => !row.pinned && row.in_use).map((row) => row.step),
    deleted,
  };
}

/**
 * Registers an imported adapter as a checkpoint of the model: at `step` when given (a pushed W&B `lora`
 * artifact names its step), else the next one (latest step + 1). Refused while a job of the model is
 * running (its worker will register the next step) and when the step is taken. Holds the claim lock, so no
 * job starts toward the step meanwhile. Several statements: run it in a transaction.
 */
export async function registerImportedCheckpoint(
  db: TrainingDb,
  args: { model: Pick<StoredModel, 'id'>; id: string; uri: string; step?: number },
): Promise<StoredCheckpoint | 'job_running' | 'step_taken'> {
  await lockClaims(db);
  const running = await db
    .selectFrom('training_jobs')
    .select('id')
    .where('model_id', '=', args.model.id)
    .where('status', '=', 'RUNNING')
    .executeTakeFirst();
  if (running) return 'job_running';
  let step = args.step;
  if (step === undefined) step = ((await latestCheckpoint(db, { model: args.model }))?.step ?? 0) + 1;
  else if (await findCheckpointByStep(db, { model: args.model, step })) return 'step_taken';
  const row = await db
    .insertInto('checkpoints')
    .values({ id: args.id, model_id: args.model.id, step, uri: args.uri, metrics: jsonb({}), job_id: null, source: 'imported' })
    .returningAll()
    .executeTakeFirstOrThrow();
  return toCheckpoint(row);
}

/** A checkpoint by step, with its storage URI. */
export async function findCheckpointByStep(db: TrainingDb, args: { model: Pick<StoredModel, 'id'>; step: number }): Promise<StoredCheckpoint | undefined> {
  const row = await db.selectFrom('checkpoints').selectAll().where('model_id', '=', args.model.id).where('step', '=', args.step).executeTakeFirst();
  return row && toCheckpoint(row);
}

/** Of these URIs, the ones a checkpoint of any model registers. */
export async function urisInUse(db: TrainingDb, args: { uris: readonly string[] }): Promise<string[]> {
  if (args.uris.length === 0) return [];
  const rows = await db.selectFrom('checkpoints').select('uri').where(sql<boolean>`uri = any(${[...args.uris]}::text[])`).execute();
  return rows.map((row) => row.uri);
}
