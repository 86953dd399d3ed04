import { sql } from 'kysely';
import { isUuid, type TrainingDb } from './db.js';
import type { StoredModel } from './rows.js';

/**
 * Deleted checkpoints as page cursors (docs/training.md, "Endpoints"). A client pages a model's checkpoints
 * with `after` = the id of the last one it saw; when that checkpoint is deleted before it asks for the next
 * page (retention landing with a new step, a delete), its id and step are remembered here so that the next
 * page still starts after that step. Written in the deleting transaction; forgotten when the model is
 * deleted, and after DELETED_CURSOR_HOURS by the expiry sweep (a listing takes seconds).
 */

/** How long a deleted checkpoint's id still works as a page cursor. */
export const DELETED_CURSOR_HOURS = 24;

/** Remembers deleted checkpoints of the model; call it in the transaction that deleted them. One statement whatever their number. */
export async function rememberDeletedCheckpoints(
  db: TrainingDb,
  args: { model: Pick<StoredModel, 'id'>; checkpoints: readonly { id: string; step: number }[] },
): Promise<void> {
  if (args.checkpoints.length === 0) return;
  const ids = args.checkpoints.map((c) => c.id);
  const steps = args.checkpoints.map((c) => c.step);
  await sql`
    insert into deleted_checkpoints (id, model_id, step)
    select id, ${args.model.id}, step from unnest(${ids}::uuid[], ${steps}::int4[]) as d(id, step)
    on conflict (id) do update set model_id = excluded.model_id, step = excluded.step, deleted_at = now()`.execute(db);
}

/**
 * The step a page cursor stands for: that of the model's checkpoint with this id, or of one deleted within
 * DELETED_CURSOR_HOURS. Undefined when the id was never a checkpoint of the model (or is long gone): a 422.
 */
export async function cursorStep(db: TrainingDb, args: { model: Pick<StoredModel, 'id'>; after: string }): Promise<number | undefined> {
  if (!isUuid(args.after)) return undefined;
  const { rows } = await sql<{ step: number }>`
    select step from checkpoints where model_id = ${args.model.id} and id = ${args.after}
    union all
    select step from deleted_checkpoints where model_id = ${args.model.id} and id = ${args.after}
      and deleted_at > now() - make_interval(hours => ${DELETED_CURSOR_HOURS})
    limit 1`.execute(db);
  return rows[0]?.step;
}

/** Forgets the deleted checkpoints of a model being deleted (its pages are a 404 from now on). */
export async function forgetModelDeletedCheckpoints(db: TrainingDb, args: { model: Pick<StoredModel, 'id'> }): Promise<void> {
  await db.deleteFrom('deleted_checkpoints').where('model_id', '=', args.model.id).execute();
}

/** Forgets deleted checkpoints older than DELETED_CURSOR_HOURS; the expiry sweep runs it. Returns how many. */
export async function forgetOldDeletedCheckpoints(db: TrainingDb): Promise<number> {
  const result = await db
    .deleteFrom('deleted_checkpoints')
    .where('deleted_at', '<=', sql<Date>`now() - make_interval(hours => ${DELETED_CURSOR_HOURS})`)
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
