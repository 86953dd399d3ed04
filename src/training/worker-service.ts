import { isDeepStrictEqual } from 'node:util';
import type { Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ConflictError, NotFoundError, RateLimitedError, UnauthorizedError, UnprocessableError } from '../errors.js';
import type { JobSignal } from './job-signal.js';
import { KeySlots } from './key-slots.js';
import { checkpointUriProblem, checkWorkerEvents } from './protocol.js';
import * as repo from './repository.js';
import type {
  ClaimRequest,
  ClaimResponse,
  CompleteRequest,
  CompleteResponse,
  FailRequest,
  FailResponse,
  HeartbeatResponse,
  PostEventsRequest,
  PageOf,
  PostEventsResponse,
} from './schemas.js';
import { jobJson } from './service.js';

/** How often this process looks at the database for jobs other processes queued, while claims wait. */
const CLAIM_POLL_MS = 1_000;
/** Retry-After of a waiting claim refused because its key holds WORKER_CLAIM_WAITS_PER_KEY waiting ones. */
export const CLAIM_BUSY_RETRY_SECONDS = 5;
/** Worker rows not seen for this long are forgotten by the lease sweep (far beyond WORKER_SEEN_SECONDS). */
const WORKER_ROW_TTL_SECONDS = 7 * 86_400;
/** Inputs read per query while streaming: a group can be megabytes, so pages stay small. */
const INPUT_PAGE_ROWS = 32;

export interface WorkerServiceDeps {
  db: repo.TrainingDb;
  config: Config;
  signal: JobSignal;
  /** Notified when a job's events or status changed (its event streams read it again). */
  jobChanges?: JobSignal;
  /** Runs after a complete registered a checkpoint (the model's retention policy); never throws. */
  onCheckpointLanded?: (modelId: string) => Promise<void>;
  /** The principal of a key as it stands now (undefined once revoked), for a claim that waited. */
  currentPrincipal?: (keyId: string) => Promise<Principal | undefined>;
}

function staleLease(jobId: string): ConflictError {
  return new ConflictError(
    `The lease token is not the current lease of training job ${jobId}: the lease expired, the job was requeued or reclaimed, or it already ended. Stop working on this job.`,
    { code: 'stale_lease', param: 'lease_token' },
  );
}

/**
 * The jobs a worker key reaches: its user's own entity and teams; every entity for an admin's worker key,
 * the operator's shared pool (docs/workers.md).
 */
function reachOf(principal: Principal): repo.WorkerReach {
  return principal.isAdmin ? 'all' : [...principal.entities];
}

/**
 * The trainer-worker protocol (docs/workers.md): claim with a lease, read inputs, heartbeat, post events,
 * complete or fail. A stale or wrong lease token is a 409 and changes nothing. Every call is scoped to the
 * jobs the worker key reaches; another tenant's job reads as an unknown one (404, or 409 on lease calls).
 */
export class WorkerService {
  private readonly db: repo.TrainingDb;

  /** Waiting claims in this process, by API key (bounded by WORKER_CLAIM_WAITS_PER_KEY) and in all. */
  private readonly waiting: KeySlots;

  constructor(private readonly deps: WorkerServiceDeps) {
    this.db = deps.db;
    this.waiting = new KeySlots(deps.config.workerClaimWaitsPerKey);
  }

  /** The one loop that watches the database for other processes' jobs while claims wait. */
  private watching = false;

  /**
   * Claims the next job that may run (entities in turn, oldest first within one), waiting up to
   * `wait_seconds` for one. Undefined when none came (204), when the app is closing, or when the caller
   * went away. A waiting claim looks again only when something changed: a job queued or ended in this
   * process (the job signal), or in another one (one watch loop per process, watchOtherProcesses). Each
   * look is a plain read; the claim lock is taken only when it found a job this worker may take, so idle
   * waiters cost the database nothing (300 of them held the lock about 300 times a second before). A key
   * holding WORKER_CLAIM_WAITS_PER_KEY waiting claims here gets 429 for the next (Retry-After). A claim
   * repeating the `claim_id` of one that took a job still running under its lease gets that job back.
   */
  async claim(principal: Principal, body: ClaimRequest, abort?: AbortSignal): Promise<ClaimResponse | undefined> {
    const { signal, config } = this.deps;
    const waits = body.wait_seconds > 0;
    if (waits) this.startWaiting(principal.keyId);
    try {
      await repo.touchWorker(this.db, { workerId: body.worker_id, apiKeyId: principal.keyId, residentTrainers: body.resident_trainers });
      const claimArgs = {
        reach: reachOf(principal),
        workerId: body.worker_id,
        claimId: body.claim_id,
        kinds: body.kinds,
        baseModels: body.base_models,
        leaseSeconds: config.workerLeaseSeconds,
        maxRunningPerEntity: config.maxRunningJobsPerEntity,
      };
      const deadline = Date.now() + body.wait_seconds * 1000;
      for (;;) {
        if (signal.isClosed || abort?.aborted) return undefined;
        const seen = signal.version;
        // A retry of a claim whose answer was lost: its job, once that claim has committed (a claim still in
        // flight commits under the claim lock, which claimJob takes before it looks for the id again).
        // In a transaction: the reclaim may fail a job whose KL reference is gone (an update and its event).
        const claimId = body.claim_id;
        const again = claimId === undefined ? undefined : await this.db.transaction().execute((trx) => repo.reclaimJob(trx, { ...claimArgs, claimId }));
        if (again) return this.claimJson(again);
        if (await repo.hasClaimableJob(this.db, claimArgs)) {
          const claim = await this.db.transaction().execute((trx) => repo.claimJob(trx, claimArgs));
          if (claim) {
            this.deps.jobChanges?.notify();
            return this.claimJson(claim);
          }
        }
        const left = deadline - Date.now();
        if (left <= 0) return undefined;
        this.watchOtherProcesses();
        await signal.wait(left, seen, abort);
        if (signal.isClosed || abort?.aborted) return undefined;
        // The key may have been revoked, or its user taken out of a team, while the claim waited.
        const now = await this.deps.currentPrincipal?.(principal.keyId);
        if (this.deps.currentPrincipal && !now) throw new UnauthorizedError('Invalid or revoked API key.');
        if (now) claimArgs.reach = reachOf(now);
      }
    } finally {
      if (waits) this.stopWaiting(principal.keyId);
    }
  }

  private startWaiting(keyId: string): void {
    const limit = this.deps.config.workerClaimWaitsPerKey;
    this.waiting.take(
      keyId,
      () =>
        new RateLimitedError(
          `This key already has ${limit} claims waiting for a job (WORKER_CLAIM_WAITS_PER_KEY); try again after Retry-After seconds, or claim with wait_seconds 0.`,
          { param: 'wait_seconds', retryAfterSeconds: CLAIM_BUSY_RETRY_SECONDS },
        ),
    );
  }

  private stopWaiting(keyId: string): void {
    this.waiting.free(keyId);
  }

  /**
   * While claims wait, one read a second for the whole process of the queued and running jobs (a digest of
   * their ids, states and attempts): when it changes, another process queued, requeued or ended a job, and
   * the waiting claims look again. The first read wakes them too: a change between a claim's own look and
   * that read would otherwise go unnoticed.
   */
  private watchOtherProcesses(): void {
    if (this.watching) return;
    this.watching = true;
    void this.watchLoop();
  }

  private async watchLoop(): Promise<void> {
    const { signal } = this.deps;
    let last: string | undefined;
    for (;;) {
      // A failed read wakes nobody (their looks would fail too); the next one that works does.
      const digest = await repo.liveJobsDigest(this.db).catch(() => undefined);
      if (digest !== undefined && digest !== last) signal.notify();
      last = digest;
      const until = Date.now() + CLAIM_POLL_MS;
      while (Date.now() < until && !signal.isClosed) await signal.wait(until - Date.now(), signal.version);
      // Checked and cleared in one step: a claim that starts waiting after this starts a new loop.
      if (this.waiting.total === 0 || signal.isClosed) {
        this.watching = false;
        return;
      }
    }
  }

  /**
   * `expires_in_ms` of a claim or heartbeat answer. Every renewal sets the expiry to the database's now()
   * plus the lease, so the lease lasts this long from the renewal, a moment before the answer leaves.
   */
  private leaseMs(): number {
    return this.deps.config.workerLeaseSeconds * 1000;
  }

  private claimJson(claim: repo.Claim): ClaimResponse {
    const { job, base_checkpoint: base, kl_reference_checkpoint: reference } = claim;
    return {
      job: {
        id: job.id,
        kind: job.kind,
        attempt: job.attempt,
        model: claim.model,
        base_checkpoint: base ? { id: base.id, step: base.step, uri: base.uri } : null,
        kl_reference_checkpoint: reference ? { id: reference.id, step: reference.step, uri: reference.uri } : null,
        target_step: job.target_step as number,
        config: job.config,
        num_inputs: job.num_inputs,
        inputs_url: `/v1/workers/jobs/${job.id}/inputs`,
      },
      lease: { token: claim.lease_token, expires_at: job.lease_expires_at as string, expires_in_ms: this.leaseMs() },
    };
  }

  /** 404 unless the job exists and the key reaches it; its inputs are readable then, in any state. */
  async requireJob(principal: Principal, jobId: string): Promise<repo.StoredJob> {
    const job = await repo.findJobForWorker(this.db, { jobId, reach: reachOf(principal) });
    if (!job) throw new NotFoundError('training job', jobId);
    return job;
  }

  /**
   * 409 like a stale token unless the key reaches the job, before any lease call looks at it: another
   * tenant's job is indistinguishable from an unknown one. (A job's model never changes entity.)
   */
  private async requireReach(principal: Principal, jobId: string): Promise<void> {
    if (!(await repo.findJobForWorker(this.db, { jobId, reach: reachOf(principal) }))) throw staleLease(jobId);
  }

  /** The job's inputs as JSON Lines, read a page at a time so that a large job is never held in memory. */
  async *inputLines(jobId: string): AsyncGenerator<string> {
    let afterSeq = -1;
    for (;;) {
      const page = await repo.readJobInputs(this.db, { jobId, afterSeq, limit: INPUT_PAGE_ROWS });
      if (page.length === 0) return;
      yield page.map((row) => `${row.json}\n`).join('');
      afterSeq = page[page.length - 1].seq;
      if (page.length < INPUT_PAGE_ROWS) return;
    }
  }

  async heartbeat(principal: Principal, jobId: string, leaseToken: string): Promise<HeartbeatResponse> {
    await this.requireReach(principal, jobId);
    const renewed = await repo.heartbeat(this.db, { jobId, leaseToken, leaseSeconds: this.deps.config.workerLeaseSeconds });
    if (!renewed) throw staleLease(jobId);
    await repo.touchWorkerOfJob(this.db, { jobId, apiKeyId: principal.keyId });
    return { expires_at: renewed.expires_at, expires_in_ms: this.leaseMs(), cancel_requested: renewed.cancel_requested };
  }

  /**
   * Appends a batch of events in one transaction: `training_started` first and once per attempt, then
   * `gradient_step` events (their data was checked to be finite numbers by the schema). A batch that breaks
   * the order is refused whole. With `first_seq` (how many events the worker posted in this attempt before
   * the batch) the post is idempotent: a batch re-posted after a lost response finds its events stored and
   * answers their ids, appending only what is new; a `first_seq` beyond what is stored is a 422.
   */
  async postEvents(principal: Principal, jobId: string, body: PostEventsRequest): Promise<PostEventsResponse> {
    await this.requireReach(principal, jobId);
    // Errors are thrown after the transaction: a throw inside would only roll back what was not written.
    const outcome = await this.db.transaction().execute(async (trx) => {
      // Locked: a retry racing its own first post waits for it, then finds its events.
      const job = await repo.findLeasedJob(trx, { jobId, leaseToken: body.lease_token });
      if (!job) return { kind: 'stale' as const };
      let repeated: { id: string }[] = [];
      if (body.first_seq !== undefined) {
        const stored = await repo.storedWorkerEvents(trx, { job, offset: body.first_seq, limit: body.events.length });
        if (body.first_seq > stored.count) return { kind: 'gap' as const, stored: stored.count };
        // A re-post is the same events: another batch at the same place (a runtime that miscounted) would
        // otherwise be answered as stored and its data lost.
        for (const [index, event] of stored.events.entries()) {
          const posted = body.events[index];
          const at = `sequence number ${body.first_seq + index} of this attempt`;
          if (event.type !== posted.type) return { kind: 'refused' as const, index, field: 'type' as const, message: `${posted.type} differs from the ${event.type} stored at ${at}` };
          // As stored: JSONB keeps -0 as 0, which a strict comparison tells apart.
          if (!isDeepStrictEqual(event.data, JSON.parse(JSON.stringify(posted.data)))) return { kind: 'refused' as const, index, field: 'data' as const, message: `the data of this ${posted.type} differs from that stored at ${at}` };
        }
        repeated = stored.events;
      }
      const fresh = body.events.slice(repeated.length);
      const ids = repeated.map((event) => event.id);
      if (fresh.length === 0) return { kind: 'appended' as const, ids };
      const problem = checkWorkerEvents(fresh, await repo.attemptStarted(trx, { job }));
      if (problem) return { kind: 'refused' as const, index: problem.index + repeated.length, field: 'type' as const, message: problem.message };
      return { kind: 'appended' as const, ids: [...ids, ...(await repo.appendWorkerEvents(trx, { job, events: fresh }))] };
    });
    if (outcome.kind === 'stale') throw staleLease(jobId);
    if (outcome.kind === 'appended') this.deps.jobChanges?.notify();
    if (outcome.kind === 'gap') {
      throw new UnprocessableError(
        `Value error, first_seq ${body.first_seq} is past the ${outcome.stored} events stored for this attempt: post the events before it first`,
        ['body', 'first_seq'],
        { input: body.first_seq },
      );
    }
    if (outcome.kind === 'refused') {
      throw new UnprocessableError(`Value error, ${outcome.message}`, ['body', 'events', outcome.index, outcome.field], {
        input: body.events[outcome.index][outcome.field],
      });
    }
    return { ids: outcome.ids };
  }

  /**
   * Registers the checkpoint at the job's target step, its `training_ended` event, COMPLETED and
   * `training_end` in one transaction. The same call again with the same token answers the same result.
   * A job whose cancel was asked for ends CANCELED without a checkpoint: 409. A URI outside
   * CHECKPOINT_URI_PREFIXES is a 422 that changes nothing (the worker then fails the job for good).
   */
  async complete(principal: Principal, jobId: string, body: CompleteRequest): Promise<CompleteResponse> {
    const requested = body.checkpoint.uri;
    const problem = checkpointUriProblem(requested, this.deps.config.checkpointUriPrefixes);
    if (problem) {
      throw new UnprocessableError(`Value error, checkpoint URI ${JSON.stringify(requested)} is not allowed: ${problem}`, ['body', 'checkpoint', 'uri'], {
        input: requested,
      });
    }
    await this.requireReach(principal, jobId);
    const result = await this.db.transaction().execute((trx) =>
      repo.completeJob(trx, { jobId, leaseToken: body.lease_token, uri: body.checkpoint.uri, metrics: body.checkpoint.metrics }),
    );
    if (result.outcome === 'stale') throw staleLease(jobId);
    this.deps.signal.notify(); // the model's next job may run now
    this.deps.jobChanges?.notify();
    if (result.outcome === 'canceled') {
      throw new ConflictError(`Training job ${jobId} was canceled; no checkpoint was registered.`, { code: 'job_canceled' });
    }
    await this.deps.onCheckpointLanded?.(result.job.model_id);
    const { id, step, uri, metrics } = result.checkpoint;
    return { job: jobJson(result.job), checkpoint: { id, step, uri, metrics } };
  }

  /** Ends the attempt: requeued when retryable with attempts left, else FAILED (or CANCELED if asked). */
  async fail(principal: Principal, jobId: string, body: FailRequest): Promise<FailResponse> {
    await this.requireReach(principal, jobId);
    const job = await this.db.transaction().execute((trx) =>
      repo.failJob(trx, { jobId, leaseToken: body.lease_token, errorMessage: body.error_message, retryable: body.retryable }),
    );
    if (!job) throw staleLease(jobId);
    this.deps.signal.notify();
    this.deps.jobChanges?.notify();
    return { job: jobJson(job) };
  }

  /**
   * Requeues or fails the attempts whose lease lapsed; safe in every process at once (SKIP LOCKED). Also
   * forgets workers not seen for a week, so that rows of workers long gone (or of a key that claimed with
   * ever new worker ids) do not pile up.
   */
  async sweepExpiredLeases(): Promise<repo.StoredJob[]> {
    const ended = await this.db.transaction().execute((trx) => repo.sweepExpiredLeases(trx, { limit: 100 }));
    if (ended.length > 0) {
      this.deps.signal.notify();
      this.deps.jobChanges?.notify();
    }
    await repo.pruneWorkers(this.db, { unseenForSeconds: WORKER_ROW_TTL_SECONDS });
    return ended;
  }

  /** `cpu_queue` of the system check: the queue table answers; shows how many jobs wait. */
  async queueCheck(): Promise<{ depth: number; running: number }> {
    const counts = await repo.countJobsByStatus(this.db);
    return { depth: counts.QUEUED ?? 0, running: counts.RUNNING ?? 0 };
  }

  /**
   * A page of the workers that called in within WORKER_SEEN_SECONDS, most recent first (the admin view);
   * one row per worker id and key. 422 for an `after` that is not such a worker.
   */
  async recentWorkers(query: { after?: string; limit: number }): Promise<PageOf<repo.WorkerSighting>> {
    const seenWithinSeconds = this.deps.config.workerSeenSeconds;
    // One more than asked: it only says whether there is more.
    const rows = await repo.listActiveWorkers(this.db, { seenWithinSeconds, after: query.after, limit: query.limit + 1 });
    if (rows.length === 0 && query.after !== undefined && !(await repo.workerRowExists(this.db, { id: query.after }))) {
      throw new UnprocessableError('Value error, after is not the id of a worker', ['query', 'after'], { input: query.after });
    }
    return repo.toPage(rows, query.limit);
  }

  /** `gpu_queue` of the system check: passes when a trainer worker called in recently. */
  async workersCheck(): Promise<{ workers_seen: number; running: number }> {
    const seenWithin = this.deps.config.workerSeenSeconds;
    const seen = await repo.countActiveWorkers(this.db, { seenWithinSeconds: seenWithin });
    const counts = await repo.countJobsByStatus(this.db);
    if (seen === 0) {
      throw new Error(
        `no trainer worker has called in within the last ${seenWithin} s (WORKER_SEEN_SECONDS): start one with a worker key (docs/workers.md)`,
      );
    }
    return { workers_seen: seen, running: counts.RUNNING ?? 0 };
  }
}
