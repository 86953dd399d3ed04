import { sql } from 'kysely';
import type { EventType, PageOf, TrainingJobEvent, WorkerEvent } from '../schemas.js';
import { isUuid, jsonb, toPage, type TrainingDb } from './db.js';
import type { StoredJob } from './rows.js';

/** Appends events in order; their `seq` (identity) is the order clients read them in. */
export async function appendEvents(
  db: TrainingDb,
  args: { jobId: string; attempt: number; events: readonly { type: EventType; data: Record<string, unknown> }[] },
): Promise<string[]> {
  if (args.events.length === 0) return [];
  const rows = args.events.map((event) => ({
    id: crypto.randomUUID(),
    job_id: args.jobId,
    attempt: args.attempt,
    type: event.type,
    data: jsonb(event.data),
  }));
  await db.insertInto('job_events').values(rows).execute();
  return rows.map((row) => row.id);
}

/** The events a leased worker posts, stamped with the job's current attempt. */
export async function appendWorkerEvents(
  db: TrainingDb,
  args: { job: StoredJob; events: readonly WorkerEvent[] },
): Promise<string[]> {
  return appendEvents(db, { jobId: args.job.id, attempt: args.job.attempt, events: args.events });
}

/** The event types workers post; `training_ended` and `training_failed` are the server's. */
const WORKER_EVENT_TYPES: EventType[] = ['training_started', 'gradient_step'];

/**
 * How many events workers posted in the job's current attempt, and the ids, types and data of those from
 * `offset` on (at most `limit`), in append order: what a re-posted batch (`first_seq`) finds stored.
 */
export async function storedWorkerEvents(
  db: TrainingDb,
  args: { job: StoredJob; offset: number; limit: number },
): Promise<{ count: number; events: { id: string; type: EventType; data: unknown }[] }> {
  const ofAttempt = db
    .selectFrom('job_events')
    .where('job_id', '=', args.job.id)
    .where('attempt', '=', args.job.attempt)
    .where('type', 'in', WORKER_EVENT_TYPES);
  const { count } = await ofAttempt.select((eb) => eb.fn.countAll<number>().as('count')).executeTakeFirstOrThrow();
  const stored = Number(count);
  const limit = Math.min(args.limit, stored - args.offset);
  if (limit <= 0) return { count: stored, events: [] };
  const events = await ofAttempt.select(['id', 'type', 'data']).orderBy('seq').offset(args.offset).limit(limit).execute();
  return { count: stored, events };
}

/** Whether the job's current attempt has posted `training_started`, which must come first and once. */
export async function attemptStarted(db: TrainingDb, args: { job: StoredJob }): Promise<boolean> {
  const row = await db
    .selectFrom('job_events')
    .select(sql<number>`1`.as('one'))
    .where('job_id', '=', args.job.id)
    .where('attempt', '=', args.job.attempt)
    .where('type', '=', 'training_started')
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * A page of the job's events in append order. `after` returns events strictly after that event; an
 * unknown `after` starts from the beginning, which the ART client's polling loop relies on (reference §3.9).
 */
export async function listEvents(
  db: TrainingDb,
  args: { job: StoredJob; after?: string; limit: number },
): Promise<PageOf<TrainingJobEvent>> {
  let query = db
    .selectFrom('job_events')
    .select(['id', 'type', 'data'])
    .where('job_id', '=', args.job.id);
  if (args.after !== undefined && isUuid(args.after)) {
    const cursor = await db
      .selectFrom('job_events')
      .select('seq')
      .where('job_id', '=', args.job.id)
      .where('id', '=', args.after)
      .executeTakeFirst();
    if (cursor) query = query.where('seq', '>', cursor.seq);
  }
  const rows = await query.orderBy('seq').limit(args.limit + 1).execute();
  return toPage(rows, args.limit);
}
