import type { Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ConflictError, NotFoundError, UnprocessableError } from '../errors.js';
import type { JobSignal } from './job-signal.js';
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
  PostEventsResponse,
  ResidentTrainer,
} from './schemas.js';
import { jobJson } from './service.js';

/** How often a waiting claim looks at the database for jobs queued by other processes. */
const CLAIM_POLL_MS = 1_000;
/** Inputs read per query while streaming: a group can be megabytes, so pages stay small. */
const INPUT_PAGE_ROWS = 32;

export interface WorkerServiceDeps {
  db: repo.TrainingDb;
  config: Config;
  signal: JobSignal;
  /** Runs after a complete registered a checkpoint (the model's retention policy); never throws. */
  onCheckpointLanded?: (modelId: string) => Promise<void>;
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

  constructor(private readonly deps: WorkerServiceDeps) {
    this.db = deps.db;
  }

  /**
   * Claims the next job that may run (entities in turn, oldest first within one), waiting up to
   * `wait_seconds` for one: woken at once by a job queued in this process, polling the database for other processes' jobs. Undefined when none came (204), when
   * the app is closing, or when the caller went away.
   */
  async claim(principal: Principal, body: ClaimRequest, abort?: AbortSignal): Promise<ClaimResponse | undefined> {
    const { signal, config } = this.deps;
    await repo.touchWorker(this.db, { workerId: body.worker_id, apiKeyId: principal.keyId, residentTrainers: body.resident_trainers });
    const claimArgs = {
      reach: reachOf(principal),
      workerId: body.worker_id,
      kinds: body.kinds,
      baseModels: body.base_models,
      leaseSeconds: config.workerLeaseSeconds,
      maxRunningPerEntity: config.maxRunningJobsPerEntity,
    };
    const deadline = Date.now() + body.wait_seconds * 1000;
    for (;;) {
      if (signal.isClosed || abort?.aborted) return undefined;
      const seen = signal.version;
      const claim = await this.db.transaction().execute((trx) => repo.claimJob(trx, claimArgs));
      if (claim) return this.claimJson(claim);
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      await signal.wait(Math.min(left, CLAIM_POLL_MS), seen, abort);
    }
  }

  private claimJson(claim: repo.Claim): ClaimResponse {
    const { job, base_checkpoint: base } = claim;
    return {
      job: {
        id: job.id,
        kind: job.kind,
        attempt: job.attempt,
        model: claim.model,
        base_checkpoint: base ? { id: base.id, step: base.step, uri: base.uri } : null,
        target_step: job.target_step as number,
        config: job.config,
        num_inputs: job.num_inputs,
        inputs_url: `/v1/workers/jobs/${job.id}/inputs`,
      },
      lease: { token: claim.lease_token, expires_at: job.lease_expires_at as string },
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
    await repo.touchWorkerOfJob(this.db, { jobId });
    return renewed;
  }

  /**
   * Appends a batch of events in one transaction: `training_started` first and once per attempt, then
   * `gradient_step` events (their data was checked to be finite numbers by the schema). A batch that breaks
   * the order is refused whole.
   */
  async postEvents(principal: Principal, jobId: string, body: PostEventsRequest): Promise<PostEventsResponse> {
    await this.requireReach(principal, jobId);
    // Errors are thrown after the transaction: a throw inside would only roll back what was not written.
    const outcome = await this.db.transaction().execute(async (trx) => {
      const job = await repo.findLeasedJob(trx, { jobId, leaseToken: body.lease_token });
      if (!job) return { kind: 'stale' as const };
      const problem = checkWorkerEvents(body.events, await repo.attemptStarted(trx, { job }));
      if (problem) return { kind: 'refused' as const, ...problem };
      return { kind: 'appended' as const, ids: await repo.appendWorkerEvents(trx, { job, events: body.events }) };
    });
    if (outcome.kind === 'stale') throw staleLease(jobId);
    if (outcome.kind === 'refused') {
      throw new UnprocessableError(`Value error, ${outcome.message}`, ['body', 'events', outcome.index, 'type'], {
        input: body.events[outcome.index].type,
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
    return { job: jobJson(job) };
  }

  /** Requeues or fails the attempts whose lease lapsed; safe in every process at once (SKIP LOCKED). */
  async sweepExpiredLeases(): Promise<repo.StoredJob[]> {
    const ended = await this.db.transaction().execute((trx) => repo.sweepExpiredLeases(trx, { limit: 100 }));
    if (ended.length > 0) this.deps.signal.notify();
    return ended;
  }

  /** `cpu_queue` of the system check: the queue table answers; shows how many jobs wait. */
  async queueCheck(): Promise<{ depth: number; running: number }> {
    const counts = await repo.countJobsByStatus(this.db);
    return { depth: counts.QUEUED ?? 0, running: counts.RUNNING ?? 0 };
  }

  /** Workers that called in within WORKER_SEEN_SECONDS, most recent first (the admin view). */
  recentWorkers(): Promise<{ worker_id: string; last_seen_at: string; resident_trainers: ResidentTrainer[] }[]> {
    return repo.listActiveWorkers(this.db, { seenWithinSeconds: this.deps.config.workerSeenSeconds });
  }

  /** `gpu_queue` of the system check: passes when a trainer worker called in recently. */
  async workersCheck(): Promise<{ workers_seen: number; running: number }> {
    const seenWithin = this.deps.config.workerSeenSeconds;
    const workers = await repo.listActiveWorkers(this.db, { seenWithinSeconds: seenWithin });
    const counts = await repo.countJobsByStatus(this.db);
    if (workers.length === 0) {
      throw new Error(
        `no trainer worker has called in within the last ${seenWithin} s (WORKER_SEEN_SECONDS): start one with a worker key (docs/workers.md)`,
      );
    }
    return { workers_seen: workers.length, running: counts.RUNNING ?? 0 };
  }
}
