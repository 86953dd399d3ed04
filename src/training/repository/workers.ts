import { sql } from 'kysely';
import type { ResidentTrainer } from '../schemas.js';
import { iso, isUuid, jsonb, type TrainingDb } from './db.js';

/**
 * Workers as they call in, one row per (api key, worker_id) (migration 0017): worker ids are chosen by the
 * workers, so one key's worker can never overwrite the row of another key's worker of the same name.
 * `id` is not in the table's type (src/training/tables.ts): it is read as SQL.
 */

const workerRowId = sql<string>`workers.id`;
const seenWithin = (seconds: number) => sql<Date>`now() - make_interval(secs => ${seconds})`;

/**
 * Records that a worker called in with a claim, for the system check's `gpu_queue` and /v1/admin/workers,
 * with its resident trainers (null when it does not report them).
 */
export async function touchWorker(
  db: TrainingDb,
  args: { workerId: string; apiKeyId: string | null; residentTrainers?: ResidentTrainer[] },
): Promise<void> {
  const residentTrainers = args.residentTrainers === undefined ? null : jsonb(args.residentTrainers);
  await db
    .insertInto('workers')
    .values({ worker_id: args.workerId, api_key_id: args.apiKeyId, last_seen_at: sql<Date>`now()`, resident_trainers: residentTrainers })
    .onConflict((oc) => oc.columns(['api_key_id', 'worker_id']).doUpdateSet({ last_seen_at: sql<Date>`now()`, resident_trainers: residentTrainers }))
    .execute();
}

/** Records that the worker holding a job's lease called in with this key (heartbeats carry no worker id). */
export async function touchWorkerOfJob(db: TrainingDb, args: { jobId: string; apiKeyId: string }): Promise<void> {
  await db
    .updateTable('workers')
    .set({ last_seen_at: sql<Date>`now()` })
    .where('api_key_id', '=', args.apiKeyId)
    .where('worker_id', '=', (eb) => eb.selectFrom('training_jobs').select('worker_id').where('id', '=', args.jobId))
    .execute();
}

export interface WorkerSighting {
  id: string;
  worker_id: string;
  api_key_id: string | null;
  last_seen_at: string;
  resident_trainers: ResidentTrainer[];
}

/**
 * Workers seen within the window, most recent first, after the worker row `after` (none when `after` is
 * not a worker's row: see workerRowExists), at most `limit`.
 */
export async function listActiveWorkers(
  db: TrainingDb,
  args: { seenWithinSeconds: number; after?: string; limit: number },
): Promise<WorkerSighting[]> {
  let query = db
    .selectFrom('workers')
    .select([workerRowId.as('id'), 'worker_id', 'api_key_id', 'last_seen_at', 'resident_trainers'])
    .where('last_seen_at', '>', seenWithin(args.seenWithinSeconds));
  if (args.after !== undefined) {
    if (!isUuid(args.after)) return [];
    // Compared in SQL: timestamps have microseconds, which a JS Date would round away.
    query = query.where(sql<boolean>`(workers.last_seen_at, workers.id) < (select c.last_seen_at, c.id from workers c where c.id = ${args.after}::uuid)`);
  }
  const rows = await query
    .orderBy('last_seen_at', 'desc')
    .orderBy(workerRowId, 'desc')
    .limit(args.limit)
    .execute();
  return rows.map((row) => ({ ...row, last_seen_at: iso(row.last_seen_at), resident_trainers: row.resident_trainers ?? [] }));
}

/**
 * Whether `id` is a worker's row (a valid cursor), also one no longer seen within the window: a worker
 * that went quiet while a client paged is still where the next page starts.
 */
export async function workerRowExists(db: TrainingDb, args: { id: string }): Promise<boolean> {
  if (!isUuid(args.id)) return false;
  const row = await db.selectFrom('workers').select('worker_id').where(workerRowId, '=', args.id).executeTakeFirst();
  return row !== undefined;
}

/** How many workers were seen within the window, counted in SQL (the unauthenticated system check asks). */
export async function countActiveWorkers(db: TrainingDb, args: { seenWithinSeconds: number }): Promise<number> {
  const row = await db
    .selectFrom('workers')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('last_seen_at', '>', seenWithin(args.seenWithinSeconds))
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** Forgets workers not seen for `unseenForSeconds`; returns how many. */
export async function pruneWorkers(db: TrainingDb, args: { unseenForSeconds: number }): Promise<number> {
  const result = await db.deleteFrom('workers').where('last_seen_at', '<', seenWithin(args.unseenForSeconds)).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/** Queue depth by status, for the system check. */
export async function countJobsByStatus(db: TrainingDb): Promise<Record<string, number>> {
  const rows = await db
    .selectFrom('training_jobs')
    .select(['status', (eb) => eb.fn.countAll<number>().as('count')])
    .where('status', 'in', ['QUEUED', 'RUNNING'])
    .groupBy('status')
    .execute();
  return Object.fromEntries(rows.map((row) => [row.status, Number(row.count)]));
}
