import { sql, type Selectable } from 'kysely';
import { klReference, referenceStep } from '../kl-reference.js';
import { MAX_INT4, type JobKind, type JobStatus, type PageOf } from '../schemas.js';
import type { TrainingJobTable } from '../tables.js';
import { chunkBySize, iso, isUuid, jsonb, jsonbText, lockClaims, toPage, type EntityScope, type TrainingDb } from './db.js';
import { appendEvents } from './events.js';
import { storageForms } from './retention.js';
import { toCheckpoint, toJob, type StoredCheckpoint, type StoredJob, type StoredModel } from './rows.js';

/**
 * Training jobs: QUEUED -> RUNNING -> COMPLETED | FAILED | CANCELED, with RUNNING -> QUEUED when an attempt
 * fails retryably or its lease lapses (docs/training.md). A lease is valid while the job is RUNNING and
 * carries that token; a new claim or a requeue replaces the token, so a stale worker can change nothing.
 * Functions that run several statements say so: the service runs them in a transaction.
 */

export const CANCELED_MESSAGE = 'training job was canceled';

// ---------------------------------------------------------------------------------------------------------
// Users' side

/**
 * Queues a job with its inputs' JSON texts (one row per trajectory group or SFT row, multi-row inserts). Several
 * statements: run it in a transaction.
 */
export async function createJob(
  db: TrainingDb,
  args: { model: StoredModel; kind: JobKind; config: Record<string, unknown>; inputsJson: readonly string[]; maxAttempts: number },
): Promise<StoredJob> {
  const row = await db
    .insertInto('training_jobs')
    .values({
      id: crypto.randomUUID(),
      model_id: args.model.id,
      kind: args.kind,
      status: 'QUEUED',
      max_attempts: args.maxAttempts,
      base_step: null,
      target_step: null,
      config: jsonb(args.config),
      num_inputs: args.inputsJson.length,
      training_start: null,
      training_end: null,
      error_message: null,
      lease_token: null,
      lease_expires_at: null,
      worker_id: null,
      claim_id: null,
      checkpoint_id: null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  const inputs = args.inputsJson.map((json, seq) => ({ seq, json }));
  for (const chunk of chunkBySize(inputs, (input) => input.json.length)) {
    await db
      .insertInto('job_inputs')
      .values(chunk.map((input) => ({ job_id: row.id, seq: input.seq, payload: jsonbText(input.json) })))
      .execute();
  }
  return toJob(row);
}

function scopedJobs(db: TrainingDb, { entityIds }: EntityScope) {
  return db
    .selectFrom('training_jobs as j')
    .innerJoin('models as m', 'm.id', 'j.model_id')
    .selectAll('j')
    .where('m.entity_id', 'in', [...entityIds]);
}

/** A job of a model the caller reaches (a deleted model's jobs stay readable). */
export async function findJob(db: TrainingDb, args: EntityScope & { jobId: string }): Promise<StoredJob | undefined> {
  if (args.entityIds.length === 0 || !isUuid(args.jobId)) return undefined;
  const row = await scopedJobs(db, args).where('j.id', '=', args.jobId).executeTakeFirst();
  return row && toJob(row);
}

/** Jobs newest first. An `after` that is not a job the caller sees gives undefined, for a 422. */
export async function listJobs(
  db: TrainingDb,
  args: EntityScope & { modelId?: string; status?: JobStatus; after?: string; limit: number },
): Promise<PageOf<StoredJob> | undefined> {
  if (args.entityIds.length === 0) return args.after === undefined ? toPage([], args.limit) : undefined;
  let query = scopedJobs(db, args);
  if (args.after !== undefined) {
    const cursor = await findJob(db, { entityIds: args.entityIds, jobId: args.after });
    if (!cursor) return undefined;
    query = query.where('j.seq', '<', db.selectFrom('training_jobs').select('seq').where('id', '=', cursor.id));
  }
  if (args.modelId !== undefined) query = query.where('j.model_id', '=', args.modelId);
  if (args.status !== undefined) query = query.where('j.status', '=', args.status);
  const rows = await query.orderBy('j.seq', 'desc').limit(args.limit + 1).execute();
  return toPage(rows.map(toJob), args.limit);
}

/**
 * Ends a job that will not run (again), with a `training_failed` event so that a client polling the events
 * stops: the ART client otherwise waits forever for a terminal event. Two statements.
 */
async function finish(
  db: TrainingDb,
  job: { id: string; attempt: number },
  outcome: { status: 'FAILED' | 'CANCELED'; errorMessage: string },
): Promise<StoredJob> {
  const row = await db
    .updateTable('training_jobs')
    .set({
      status: outcome.status,
      error_message: outcome.errorMessage,
      training_end: sql`now()`,
      lease_expires_at: null,
    })
    .where('id', '=', job.id)
    .returningAll()
    .executeTakeFirstOrThrow();
  await appendEvents(db, {
    jobId: job.id,
    attempt: job.attempt,
    events: [{ type: 'training_failed', data: { error_message: outcome.errorMessage } }],
  });
  return toJob(row);
}

/**
 * Cancels a job: a queued one at once; a running one is asked to stop (the worker learns it from its next
 * heartbeat and ends as CANCELED when it reports or its lease lapses). A finished job is returned as it is.
 * Several statements: run it in a transaction.
 */
export async function cancelJob(db: TrainingDb, args: EntityScope & { jobId: string }): Promise<StoredJob | undefined> {
  const job = await findJob(db, args);
  if (!job) return undefined;
  const locked = await db.selectFrom('training_jobs').selectAll().where('id', '=', job.id).forUpdate().executeTakeFirstOrThrow();
  if (locked.status === 'QUEUED') {
    return finish(db, locked, { status: 'CANCELED', errorMessage: CANCELED_MESSAGE });
  }
  if (locked.status === 'RUNNING' && !locked.cancel_requested) {
    const row = await db
      .updateTable('training_jobs')
      .set({ cancel_requested: true })
      .where('id', '=', job.id)
      .returningAll()
      .executeTakeFirstOrThrow();
    return toJob(row);
  }
  return toJob(locked);
}

/**
 * Cancels every queued or running job of a model (used when the model is deleted, after the model row is
 * updated). Both states are locked in ONE statement and each row is acted on by the status it has once
 * locked: with two statements (queued, then running), an attempt requeued between them (a retryable fail,
 * the lease sweep) committed QUEUED after the first and was skipped by the second, stranded on the deleted
 * model. A row another transaction holds is waited for and re-read, so a requeue that commits first is
 * canceled here, and one that waits for this commit finds `cancel_requested` and ends CANCELED. Lock order:
 * model row, then job rows; endAttempt holds a job row and reads the model without a lock, so the two never
 * wait on each other. Several statements.
 */
export async function cancelModelJobs(db: TrainingDb, args: { modelId: string }): Promise<void> {
  const live = await db
    .selectFrom('training_jobs')
    .select(['id', 'attempt', 'status', 'cancel_requested'])
    .where('model_id', '=', args.modelId)
    .where('status', 'in', ['QUEUED', 'RUNNING'])
    .orderBy('id')
    .forUpdate()
    .execute();
  for (const job of live) {
    if (job.status === 'QUEUED') await finish(db, job, { status: 'CANCELED', errorMessage: CANCELED_MESSAGE });
  }
  const running = live.filter((job) => job.status === 'RUNNING' && !job.cancel_requested).map((job) => job.id);
  if (running.length > 0) await db.updateTable('training_jobs').set({ cancel_requested: true }).where('id', 'in', running).execute();
}

// ---------------------------------------------------------------------------------------------------------
// Workers' side

const leaseEnd = (seconds: number) => sql<Date>`now() + make_interval(secs => ${seconds})`;

/**
 * The jobs a worker key reaches: those of the entities (by name) its user belongs to, or every entity's
 * for an admin's worker key, the operator's shared pool (docs/workers.md).
 */
export type WorkerReach = readonly string[] | 'all';

/** The ids of the entities a worker reaches by name (a list: `reach` is not 'all'). */
const entitiesReached = (db: TrainingDb, reach: readonly string[]) =>
  db.selectFrom('entities').select('entities.id').where('entities.name', 'in', [...reach]);

export interface Claim {
  job: StoredJob;
  lease_token: string;
  model: { id: string; entity: string; project: string; name: string; base_model: string };
  base_checkpoint: StoredCheckpoint | undefined;
  /** The checkpoint the KL penalty compares against; undefined: none (KL off, a path, or the base model). */
  kl_reference_checkpoint: StoredCheckpoint | undefined;
}

interface ClaimFilter {
  reach: WorkerReach;
  kinds?: readonly JobKind[];
  baseModels?: readonly string[];
  maxRunningPerEntity?: number;
}

/**
 * The queued jobs a worker may take now, in claim order. A model's jobs run one at a time in creation
 * order, so a job waits while its model has a running job or an older queued one. Among the rest, entities
 * take turns: the entity whose last claim is oldest (or that never had one) goes first, and within an
 * entity the oldest job, so that one team's hundred queued jobs do not starve another's one.
 * `maxRunningPerEntity` (0: none) passes over entities that already run that many jobs.
 */
function claimCandidates(db: TrainingDb, args: ClaimFilter) {
  const { reach } = args;
  let candidate = db
    .selectFrom('training_jobs as j')
    .innerJoin('models as m', 'm.id', 'j.model_id')
    .leftJoin('entity_claim_turns as t', 't.entity_id', 'm.entity_id')
    .select(['j.id'])
    .where('j.status', '=', 'QUEUED')
    .where('m.deleted_at', 'is', null)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('training_jobs as o')
            .select(sql<number>`1`.as('one'))
            .whereRef('o.model_id', '=', 'j.model_id')
            .where((eb) => eb.or([eb('o.status', '=', 'RUNNING'), eb.and([eb('o.status', '=', 'QUEUED'), eb('o.seq', '<', eb.ref('j.seq'))])])),
        ),
      ),
    );
  if (reach !== 'all') candidate = candidate.where('m.entity_id', 'in', entitiesReached(db, reach));
  if (args.kinds?.length) candidate = candidate.where('j.kind', 'in', [...args.kinds]);
  if (args.baseModels?.length) candidate = candidate.where('m.base_model', 'in', [...args.baseModels]);
  if (args.maxRunningPerEntity) {
    const running = sql<number>`(select count(*) from training_jobs r join models rm on rm.id = r.model_id where rm.entity_id = m.entity_id and r.status = 'RUNNING')`;
    candidate = candidate.where(running, '<', args.maxRunningPerEntity);
  }
  return candidate.orderBy(sql`coalesce(t.turn, 0)`).orderBy('j.seq');
}

/**
 * Whether claimJob would find a job for this worker now: the same query as a plain read, without the claim
 * lock, so that idle waiting claims look without queueing behind each other (worker-service.ts). A true
 * here may still find nothing under the lock when another claim took the job first.
 */
export async function hasClaimableJob(db: TrainingDb, args: ClaimFilter): Promise<boolean> {
  if (args.reach !== 'all' && args.reach.length === 0) return false;
  return (await claimCandidates(db, args).limit(1).executeTakeFirst()) !== undefined;
}

/**
 * A digest of the queued and running jobs (ids, states, attempts): it changes whenever a job is queued,
 * claimed, requeued or ends, in any process. Waiting claims look again when it does (worker-service.ts).
 */
export async function liveJobsDigest(db: TrainingDb): Promise<string> {
  const row = await db
    .selectFrom('training_jobs')
    .select(sql<string>`count(*) || ':' || coalesce(md5(string_agg(id::text || status || attempt, ',' order by seq)), '')`.as('digest'))
    .where('status', 'in', ['QUEUED', 'RUNNING'])
    .executeTakeFirstOrThrow();
  return row.digest;
}

/**
 * Claims the next queued job that may run now (claimCandidates' order). The target step is fixed here,
 * from the checkpoints that exist now. Several statements: run it in a transaction.
 *
 * Claims serialize on a transaction-level advisory lock: the turn order and the running count are read
 * and written by every claim, and two concurrent claims (other workers, other trainyard processes on one
 * PostgreSQL) that each saw the other's count before it committed would run one job over the limit.
 * A claim is a few index lookups, so the queue of claims stays short. With `claimId`, the job an earlier
 * claim with that id took (reclaimJob) comes first: a retry that looked before that claim committed
 * finds it here, behind the lock, rather than taking a second job.
 */
export async function claimJob(
  db: TrainingDb,
  args: ClaimFilter & { workerId: string; claimId?: string; leaseSeconds: number },
): Promise<Claim | undefined> {
  const { reach } = args;
  if (reach !== 'all' && reach.length === 0) return undefined;
  await lockClaims(db);
  if (args.claimId !== undefined) {
    // Under the lock, a claim with this id that was in flight when the caller looked has committed.
    const again = await reclaimJob(db, { ...args, claimId: args.claimId });
    if (again) return again;
  }
  const candidate = claimCandidates(db, args);

  const latestStep = sql<number>`(select coalesce(max(c.step), 0) from checkpoints c where c.model_id = training_jobs.model_id)`;
  let claim: Claim | undefined;
  // A job whose KL reference is gone is failed here and the next one taken: each turn ends a job.
  while (!claim) {
    const row = await db
      .updateTable('training_jobs')
      .set({
        status: 'RUNNING',
        lease_token: crypto.randomUUID(),
        lease_expires_at: leaseEnd(args.leaseSeconds),
        worker_id: args.workerId,
        claim_id: args.claimId ?? null,
        training_start: sql`coalesce(training_start, now())`,
        base_step: latestStep,
        target_step: sql<number>`${latestStep} + 1`,
      })
      .where('id', '=', candidate.limit(1).forUpdate('j').skipLocked())
      .returningAll()
      .executeTakeFirst();
    if (!row) return undefined;
    claim = await claimOrFail(db, row);
  }
  const row = claim.job;
  await db
    .insertInto('entity_claim_turns')
    .values((eb) => ({
      entity_id: eb.selectFrom('models').select('entity_id').where('id', '=', row.model_id),
      turn: sql<number>`nextval('claim_turn_seq')`,
    }))
    .onConflict((oc) => oc.column('entity_id').doUpdateSet({ turn: sql<number>`excluded.turn` }))
    .execute();
  return claim;
}

/**
 * The job an earlier claim with this `claim_id` took, when it still runs under that claim's lease, with
 * the lease renewed: a worker that lost the claim's answer asks again with the same id and carries on
 * with that job. Undefined when no such job runs (it ended, was requeued or reclaimed), or when it is no
 * longer within the worker's reach.
 */
export async function reclaimJob(
  db: TrainingDb,
  args: { reach: WorkerReach; workerId: string; claimId: string; leaseSeconds: number },
): Promise<Claim | undefined> {
  const { reach } = args;
  if (reach !== 'all' && reach.length === 0) return undefined;
  let query = db
    .updateTable('training_jobs')
    .set({ lease_expires_at: leaseEnd(args.leaseSeconds) })
    .where('claim_id', '=', args.claimId)
    .where('worker_id', '=', args.workerId)
    .where('status', '=', 'RUNNING');
  if (reach !== 'all') query = query.where('model_id', 'in', db.selectFrom('models').select('models.id').where('models.entity_id', 'in', entitiesReached(db, reach)));
  const row = await query.returningAll().executeTakeFirst();
  return row && claimOrFail(db, row);
}

/**
 * A claimed job as the worker gets it: with its model, the checkpoint it starts from and its KL reference
 * checkpoint. The step of a `kl_penalty_step_lag` reference is counted back from the base step, which the
 * claim fixes (the latest checkpoint now: jobs queued before this one, imports and deletes change it until
 * then), so it is resolved here, not when the job was created; from now on deletes and retention spare it
 * (repository/in-use.ts). When that checkpoint is gone (deleted before the job started) the job fails now,
 * as no attempt could succeed, naming the setting and the step, and undefined is returned.
 */
async function claimOrFail(db: TrainingDb, row: Selectable<TrainingJobTable>): Promise<Claim | undefined> {
  const model = await db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .select(['m.id', 'e.name as entity', 'm.project', 'm.name', 'm.base_model'])
    .where('m.id', '=', row.model_id)
    .executeTakeFirstOrThrow();
  const base = await db
    .selectFrom('checkpoints')
    .selectAll()
    .where('model_id', '=', row.model_id)
    .where('step', '=', row.base_step ?? 0)
    .executeTakeFirst();
  const baseStep = row.base_step ?? 0;
  const reference = row.kind === 'rl' ? klReference(row.config.experimental_config) : undefined;
  const step = reference === undefined ? 0 : referenceStep(reference, baseStep);
  let klReferenceCheckpoint: StoredCheckpoint | undefined;
  if (reference !== undefined && step > 0) {
    // A step past the column's range (a job queued before steps were bounded here) is no checkpoint's.
    const found = step > MAX_INT4 ? undefined : await db.selectFrom('checkpoints').selectAll().where('model_id', '=', row.model_id).where('step', '=', step).executeTakeFirst();
    if (!found) {
      const counted = reference.field === 'kl_penalty_step_lag' ? ` (this job's base step ${baseStep} - ${reference.lag})` : '';
      const errorMessage = `experimental_config.${reference.field}: the model has no checkpoint of step ${step}${counted} to be the KL reference; it was deleted before the job started`;
      await finish(db, row, { status: 'FAILED', errorMessage });
      return undefined;
    }
    klReferenceCheckpoint = toCheckpoint(found);
  }
  return {
    job: toJob(row),
    lease_token: row.lease_token as string,
    model,
    base_checkpoint: base && toCheckpoint(base),
    kl_reference_checkpoint: klReferenceCheckpoint,
  };
}

/** Renews a lease. Undefined when the token is not the job's current lease (the service answers 409). */
export async function heartbeat(
  db: TrainingDb,
  args: { jobId: string; leaseToken: string; leaseSeconds: number },
): Promise<{ expires_at: string; cancel_requested: boolean } | undefined> {
  if (!isUuid(args.jobId) || !isUuid(args.leaseToken)) return undefined;
  const row = await db
    .updateTable('training_jobs')
    .set({ lease_expires_at: leaseEnd(args.leaseSeconds) })
    .where('id', '=', args.jobId)
    .where('status', '=', 'RUNNING')
    .where('lease_token', '=', args.leaseToken)
    .returning(['lease_expires_at', 'cancel_requested'])
    .executeTakeFirst();
  return row && { expires_at: iso(row.lease_expires_at as Date), cancel_requested: row.cancel_requested };
}

/**
 * The running job this lease holds, locked until the transaction ends, so that its state cannot change
 * between the check and the caller's writes. Undefined for a stale or wrong token.
 */
export async function findLeasedJob(db: TrainingDb, args: { jobId: string; leaseToken: string }): Promise<StoredJob | undefined> {
  const row = await lockLeasedRow(db, args);
  return row && toJob(row);
}

async function lockLeasedRow(db: TrainingDb, args: { jobId: string; leaseToken: string }): Promise<Selectable<TrainingJobTable> | undefined> {
  if (!isUuid(args.jobId) || !isUuid(args.leaseToken)) return undefined;
  return db
    .selectFrom('training_jobs')
    .selectAll()
    .where('id', '=', args.jobId)
    .where('status', '=', 'RUNNING')
    .where('lease_token', '=', args.leaseToken)
    .forUpdate()
    .executeTakeFirst();
}

/** The checkpoint a completion registered, as the worker's complete answers it. */
export type CompletedCheckpoint = Pick<StoredCheckpoint, 'id' | 'step' | 'uri' | 'metrics'>;

export type CompleteResult =
  | { outcome: 'completed'; job: StoredJob; checkpoint: CompletedCheckpoint }
  | { outcome: 'canceled'; job: StoredJob }
  | { outcome: 'stale' };

/**
 * Completes the leased job: the checkpoint at `target_step`, the `training_ended` event, COMPLETED and
 * `training_end`, so that a client seeing `training_ended` always finds the checkpoint (reference §4).
 * Repeating it with the same token returns the first result and writes nothing, also once the checkpoint
 * has been deleted (retention may delete it as soon as the next step lands, before a worker that lost the
 * first response retries): the answer then names it by the id and step its `training_ended` event records,
 * with the uri and metrics the repeat carries. A job asked to cancel ends CANCELED without a checkpoint.
 * Several statements: run it in ONE transaction.
 */
export async function completeJob(
  db: TrainingDb,
  args: { jobId: string; leaseToken: string; uri: string; metrics: Record<string, number> },
): Promise<CompleteResult> {
  if (!isUuid(args.jobId) || !isUuid(args.leaseToken)) return { outcome: 'stale' };
  const row = await db
    .selectFrom('training_jobs')
    .selectAll()
    .where('id', '=', args.jobId)
    .where('lease_token', '=', args.leaseToken)
    .forUpdate()
    .executeTakeFirst();
  if (!row) return { outcome: 'stale' };
  if (row.status === 'COMPLETED') {
    if (row.checkpoint_id !== null) {
      const checkpoint = await db.selectFrom('checkpoints').selectAll().where('id', '=', row.checkpoint_id).executeTakeFirst();
      if (checkpoint) return { outcome: 'completed', job: toJob(row), checkpoint: toCheckpoint(checkpoint) };
    }
    // Deleted since (checkpoint_id was set null): the completion's own record says which it was.
    const ended = await db
      .selectFrom('job_events')
      .select('data')
      .where('job_id', '=', row.id)
      .where('type', '=', 'training_ended')
      .orderBy('seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    const { step, checkpoint_id: id } = (ended?.data ?? {}) as { step?: unknown; checkpoint_id?: unknown };
    if (typeof step === 'number' && typeof id === 'string') {
      return { outcome: 'completed', job: toJob(row), checkpoint: { id, step, uri: args.uri, metrics: args.metrics } };
    }
  }
  if (row.status === 'CANCELED') return { outcome: 'canceled', job: toJob(row) };
  if (row.status !== 'RUNNING') return { outcome: 'stale' };
  if (row.cancel_requested) {
    return { outcome: 'canceled', job: await finish(db, row, { status: 'CANCELED', errorMessage: CANCELED_MESSAGE }) };
  }

  const step = row.target_step as number;
  const checkpoint = await db
    .insertInto('checkpoints')
    .values({ id: crypto.randomUUID(), model_id: row.model_id, step, uri: args.uri, metrics: jsonb(args.metrics), job_id: row.id })
    .returningAll()
    .executeTakeFirstOrThrow();
  // A deleted checkpoint's storage that this one now uses (the step was deleted and trained again, and the
  // worker writes per model and step) is no longer to be deleted.
  await db
    .deleteFrom('checkpoint_releases')
    .where('uri', 'in', storageForms(args.uri))
    .where('entity_id', 'in', (eb) => eb.selectFrom('models').select('models.entity_id').where('models.id', '=', row.model_id))
    .execute();
  await appendEvents(db, {
    jobId: row.id,
    attempt: row.attempt,
    events: [{ type: 'training_ended', data: { step, checkpoint_id: checkpoint.id } }],
  });
  const done = await db
    .updateTable('training_jobs')
    // error_message is cleared: an earlier failed attempt's message does not describe a completed job.
    .set({ status: 'COMPLETED', error_message: null, training_end: sql`now()`, lease_expires_at: null, checkpoint_id: checkpoint.id })
    .where('id', '=', row.id)
    .returningAll()
    .executeTakeFirstOrThrow();
  return { outcome: 'completed', job: toJob(done), checkpoint: toCheckpoint(checkpoint) };
}

/**
 * Ends an attempt that did not finish: requeued (attempt + 1) when retryable with attempts left, CANCELED
 * when a cancel was asked for, else FAILED. Several statements: run it in a transaction on a locked row.
 */
async function endAttempt(
  db: TrainingDb,
  row: Selectable<TrainingJobTable>,
  args: { errorMessage: string; retryable: boolean },
): Promise<StoredJob> {
  if (row.cancel_requested) return finish(db, row, { status: 'CANCELED', errorMessage: CANCELED_MESSAGE });
  // A job of a deleted model is never claimed again: canceled, not requeued. Read without a lock (a model
  // delete holds the model row and waits for this job row: a share lock here would deadlock with it).
  const model = await db.selectFrom('models').select('deleted_at').where('id', '=', row.model_id).executeTakeFirst();
  if (!model || model.deleted_at !== null) return finish(db, row, { status: 'CANCELED', errorMessage: CANCELED_MESSAGE });
  if (!args.retryable || row.attempt >= row.max_attempts) {
    return finish(db, row, { status: 'FAILED', errorMessage: args.errorMessage });
  }
  const requeued = await db
    .updateTable('training_jobs')
    .set({
      status: 'QUEUED',
      attempt: row.attempt + 1,
      error_message: args.errorMessage,
      lease_token: null,
      lease_expires_at: null,
      worker_id: null,
      claim_id: null,
      base_step: null,
      target_step: null,
    })
    .where('id', '=', row.id)
    .returningAll()
    .executeTakeFirstOrThrow();
  return toJob(requeued);
}

/** A worker reports failure. Undefined for a stale or wrong token. Several statements: run in a transaction. */
export async function failJob(
  db: TrainingDb,
  args: { jobId: string; leaseToken: string; errorMessage: string; retryable: boolean },
): Promise<StoredJob | undefined> {
  const row = await lockLeasedRow(db, args);
  return row && endAttempt(db, row, args);
}

/**
 * Ends the attempts whose lease lapsed, as a retryable failure. Rows another sweeper holds are skipped, so
 * every process may sweep at once. Several statements: run it in a transaction.
 */
export async function sweepExpiredLeases(db: TrainingDb, args: { limit: number }): Promise<StoredJob[]> {
  const expired = await db
    .selectFrom('training_jobs')
    .selectAll()
    .where('status', '=', 'RUNNING')
    .where('lease_expires_at', '<', sql<Date>`now()`)
    .orderBy('lease_expires_at')
    .limit(args.limit)
    .forUpdate()
    .skipLocked()
    .execute();
  const ended: StoredJob[] = [];
  for (const row of expired) {
    ended.push(await endAttempt(db, row, { errorMessage: `lease of worker ${row.worker_id ?? '(unknown)'} expired`, retryable: true }));
  }
  return ended;
}

/**
 * A page of the job's inputs as JSON text, one group or row each, for the worker's JSON Lines stream.
 * Read as text so that a large input is not parsed and serialised again on its way through.
 */
export async function readJobInputs(
  db: TrainingDb,
  args: { jobId: string; afterSeq: number; limit: number },
): Promise<{ seq: number; json: string }[]> {
  if (!isUuid(args.jobId)) return [];
  return db
    .selectFrom('job_inputs')
    .select(['seq', sql<string>`payload::text`.as('json')])
    .where('job_id', '=', args.jobId)
    .where('seq', '>', args.afterSeq)
    .orderBy('seq')
    .limit(args.limit)
    .execute();
}

/** A job as the worker protocol sees it: by id, if the worker key reaches its model's entity. */
export async function findJobForWorker(db: TrainingDb, args: { jobId: string; reach: WorkerReach }): Promise<StoredJob | undefined> {
  const { reach } = args;
  if (!isUuid(args.jobId) || (reach !== 'all' && reach.length === 0)) return undefined;
  let query = db.selectFrom('training_jobs as j').selectAll('j').where('j.id', '=', args.jobId);
  if (reach !== 'all') {
    query = query
      .innerJoin('models as m', 'm.id', 'j.model_id')
      .innerJoin('entities as e', 'e.id', 'm.entity_id')
      .where('e.name', 'in', [...reach]);
  }
  const row = await query.executeTakeFirst();
  return row && toJob(row);
}
