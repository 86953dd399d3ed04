import { sql } from 'kysely';
import type { ResidentTrainer } from '../schemas.js';
import { iso, jsonb, type TrainingDb } from './db.js';

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
    .onConflict((oc) =>
      oc.column('worker_id').doUpdateSet({ api_key_id: args.apiKeyId, last_seen_at: sql<Date>`now()`, resident_trainers: residentTrainers }),
    )
    .execute();
}

/** Records that the worker holding a job's lease called in (heartbeats carry no worker id). */
export async function touchWorkerOfJob(db: TrainingDb, args: { jobId: string }): Promise<void> {
  await db
    .updateTable('workers')
    .set({ last_seen_at: sql<Date>`now()` })
    .where('worker_id', '=', (eb) => eb.selectFrom('training_jobs').select('worker_id').where('id', '=', args.jobId))
    .execute();
}

/** Workers seen within the window, most recent first. */
export async function listActiveWorkers(
  db: TrainingDb,
  args: { seenWithinSeconds: number },
): Promise<{ worker_id: string; last_seen_at: string; resident_trainers: ResidentTrainer[] }[]> {
  const rows = await db
    .selectFrom('workers')
    .select(['worker_id', 'last_seen_at', 'resident_trainers'])
    .where('last_seen_at', '>', sql<Date>`now() - make_interval(secs => ${args.seenWithinSeconds})`)
    .orderBy('last_seen_at', 'desc')
    .execute();
  return rows.map((row) => ({ worker_id: row.worker_id, last_seen_at: iso(row.last_seen_at), resident_trainers: row.resident_trainers ?? [] }));
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
