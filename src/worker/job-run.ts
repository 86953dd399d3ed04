import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { FailRequest, type ClaimResponse } from '../training/schemas.js';
import { LeaseLostError, ProtocolError, type Leased, type WorkerClient } from './client.js';
import { EventBatcher } from './event-batcher.js';
import {
  buildJobSpec,
  JOB_DIR_REFRESH_MS,
  jobPaths,
  prepareJobDirs,
  refreshJobDir,
  removeJobFiles,
  removeOutput,
  writeJobSpec,
  type JobPaths,
} from './job-files.js';
import type { ResidentTrainerSlot } from './resident.js';
import { checkpointDirectory } from './storage-releases.js';
import { storableText } from './text.js';
import { EventOrder, parseTrainerLine } from './trainer-output.js';
import { TrainerProcess, warnLongLine, type TrainerExit, type TrainerHandlers } from './trainer-process.js';

/** Exit status a trainer uses to say "retrying will not help" (bad config, unusable inputs). */
export const PERMANENT_FAILURE_EXIT_CODE = 3;

/**
 * Exit status a trainer uses to say "this machine cannot run me" (asked for CUDA where there is none, say):
 * not the job's fault, so the attempt fails as retryable for another worker, and this worker stops claiming.
 */
export const UNFIT_MACHINE_EXIT_CODE = 4;

/** The message a canceled job is failed with; the server ends it CANCELED whatever the message. */
export const CANCELED_MESSAGE = 'training job was canceled';

/** Characters of a failure message the server takes. */
const ERROR_MESSAGE_CHARS = FailRequest.shape.error_message.maxLength!;

/** Characters of the trainer's stderr carried in a failure message (of ERROR_MESSAGE_CHARS). */
const STDERR_TAIL_CHARS = 4000;

/** The least a heartbeat request waits for its answer, however short the heartbeat interval. */
const MIN_HEARTBEAT_TIMEOUT_MS = 1000;

export interface JobRunSettings {
  command: readonly string[];
  workDir: string;
  outputDir: string;
  workerId: string;
  cancelGraceMs: number;
  /** Undefined: a third of the lease, between 0.5 s and 20 s. */
  heartbeatMs: number | undefined;
  eventWindowMs: number;
  trainerEnv: Readonly<Record<string, string | undefined>>;
  /** Offer the trainer residency: it may keep running and take the slot's next job on stdin. */
  resident: boolean;
}

/** How an attempt ended, from this worker's side. */
export type JobOutcome =
  | { status: 'completed'; checkpointId: string; step: number }
  | { status: 'failed'; retryable: boolean; message: string }
  | { status: 'canceled' }
  | { status: 'interrupted' }
  /**
   * Nothing could be reported: the lease was lost (swept, reclaimed, or the job canceled under us), or the
   * server stayed away past the retries (its lease sweep then ends the attempt).
   */
  | { status: 'unreported'; reason: string };

type StopReason = 'cancel' | 'lease_lost' | 'interrupt';

/**
 * One claimed attempt, from inputs to report: download the inputs, write the spec, run the trainer,
 * forward its events, heartbeat throughout, then complete or fail. A heartbeat that answers
 * `cancel_requested`, a lost lease (409) or the worker shutting down stops the trainer (SIGTERM, then
 * SIGKILL after the grace period) and decides how the attempt is reported.
 */
export class JobRun {
  readonly jobId: string;
  /** Checkpoint directories under the output directory this attempt reads (its base and KL reference checkpoints) or writes. */
  readonly checkpointDirectories: readonly string[];
  private readonly paths: JobPaths;
  private readonly leaseToken: string;
  private readonly log: Logger;
  private stopReason: StopReason | undefined;
  private leaseLost = false;
  /** The stopping of a trainer let go after a job_end with another exit code (run() waits for it). */
  private releasing: Promise<TrainerExit> | undefined;
  private readonly stopping = new AbortController();
  private readonly claim: ClaimResponse;
  /** The lease's expiry on the server's clock, for the log only. */
  private leaseExpiresAt: string;
  /** When the lease lapses on this machine's monotonic clock (performance.now()): never compared with `expires_at`. */
  private leaseEndsAt: number;

  /**
   * `onUnfitMachine`: called, before the attempt is reported, when the trainer exits with
   * UNFIT_MACHINE_EXIT_CODE, with the reason it gave (the last line of its stderr).
   */
  constructor(
    claimed: Leased<ClaimResponse>,
    private readonly client: WorkerClient,
    private readonly settings: JobRunSettings,
    logger: Logger,
    private readonly resident?: ResidentTrainerSlot,
    private readonly onUnfitMachine?: (reason: string) => void,
  ) {
    const claim = claimed.answer;
    this.claim = claim;
    this.leaseEndsAt = claimed.leaseEndsAt;
    this.jobId = claim.job.id;
    this.paths = jobPaths(settings, claim.job);
    const read = [claim.job.base_checkpoint, claim.job.kl_reference_checkpoint].map((checkpoint) => checkpoint ? checkpointDirectory(checkpoint.uri, settings.outputDir) : undefined);
    this.checkpointDirectories = [this.paths.output, ...read.filter((directory) => directory !== undefined)];
    this.leaseToken = claim.lease.token;
    this.leaseExpiresAt = claim.lease.expires_at;
    this.log = logger.child({ job_id: claim.job.id, attempt: claim.job.attempt });
  }

  /** The worker is shutting down and the drain period is over: stop the trainer, fail as retryable. */
  interrupt(): void {
    this.stop('interrupt');
  }

  async run(): Promise<JobOutcome> {
    const outcome = await this.attempt(this.paths);
    // A trainer let go after its job_end holds its devices until it is gone: the slot's next job waits for it.
    if (this.releasing) {
      const exit = await this.releasing;
      this.log.info({ code: exit.code, signal: exit.signal }, 'the trainer let go after the job is gone');
    }
    // The server ended the attempt without a checkpoint: what the trainer wrote is no adapter of anyone's
    // (a later attempt starts its directory afresh anyway). Unreported attempts keep theirs: the server may
    // have registered it.
    if (outcome.status === 'failed' || outcome.status === 'canceled' || outcome.status === 'interrupted') {
      await removeOutput(this.paths).catch((error: Error) => this.log.warn({ err: error.message }, 'could not remove the attempt\'s output directory'));
    }
    return outcome;
  }

  private async attempt(paths: JobPaths): Promise<JobOutcome> {
    const { job } = this.claim;
    const heartbeats = new AbortController();
    const heartbeatLoop = this.heartbeatLoop(heartbeats.signal);
    this.log.info({ model: `${job.model.entity}/${job.model.project}/${job.model.name}`, target_step: job.target_step }, 'job claimed');
    let refresh: NodeJS.Timeout | undefined;
    try {
      await prepareJobDirs(paths);
      // The job directory stays marked as in use, so that no other worker of the work dir takes it for a dead one's.
      refresh = setInterval(() => {
        refreshJobDir(paths).catch((error: Error) => this.log.warn({ err: error.message }, 'could not mark the job directory as in use'));
      }, JOB_DIR_REFRESH_MS);
      try {
        await this.client.downloadInputs(job, paths.inputs, this.stopping.signal);
      } catch (error) {
        if (error instanceof LeaseLostError) this.stop('lease_lost');
        if (this.stopReason) return await this.report(undefined, undefined);
        return await this.reportFailure(`could not download the job's inputs: ${(error as Error).message}`, true);
      }
      await writeJobSpec(paths, buildJobSpec(job, paths, this.settings.workerId));
      if (this.stopReason) return await this.report(undefined, undefined);
      return await this.runTrainer(paths.spec);
    } catch (error) {
      // The worker's own trouble (a full disk, a work dir it may not write): another worker may do better.
      this.log.error({ err: (error as Error).message }, 'job run failed in the worker');
      if (this.leaseLost) return unreported('lease lost');
      return await this.reportFailure(`worker ${this.settings.workerId} failed to run the job: ${(error as Error).message}`, true);
    } finally {
      clearInterval(refresh);
      heartbeats.abort();
      await heartbeatLoop;
      await removeJobFiles(paths).catch((error: Error) => this.log.warn({ err: error.message }, 'could not remove job files'));
    }
  }

  private async runTrainer(specPath: string): Promise<JobOutcome> {
    const order = new EventOrder(this.claim.job.num_inputs);
    // Events of this attempt the server has stored, sent as `first_seq` so that a retried post is not
    // appended twice. Unknown once a batch was dropped after transient failures (it may have been stored):
    // later batches then go without it, as older workers post.
    let posted: number | undefined = 0;
    const batcher = new EventBatcher({
      windowMs: this.settings.eventWindowMs,
      send: async (events) => {
        try {
          await this.client.postEvents(this.jobId, this.leaseToken, events, posted);
        } catch (error) {
          // A refusal (4xx) stored nothing of the batch; anything else may have stored it.
          if (!(error instanceof ProtocolError || error instanceof LeaseLostError)) posted = undefined;
          throw error;
        }
        if (posted !== undefined) posted += events.length;
      },
      onError: (error, events) => {
        if (error instanceof LeaseLostError) this.stop('lease_lost');
        else this.log.warn({ err: (error as Error).message, dropped_events: events.length }, 'events could not be posted; dropped');
      },
    });
    let checkpoint: { uri: string; metrics: Record<string, number> } | undefined;
    const trainerLog = this.log.child({ source: 'trainer' });
    // A resident trainer ends a job with a job_end line on stderr, then on stdout. The two pipes are read
    // independently, so the job ends once both copies are in: every stderr line before it belongs to this job
    // (and to its failure message). A trainer that sends only the stdout copy is waited for 1 s at most.
    let endJob: (exit: TrainerExit) => void = () => {};
    const jobEnded = new Promise<TrainerExit>((resolve) => (endJob = resolve));
    let endOnStdout: TrainerExit | undefined;
    let endOnStderr = false;
    let stderrWait: NodeJS.Timeout | undefined;
    const isOurJobEnd = (line: string) => {
      const parsed = line.trimStart().startsWith('{') ? parseTrainerLine(line) : undefined;
      return parsed?.kind === 'job_end' && parsed.specPath === specPath ? parsed : undefined;
    };

    // Whether the trainer has printed an event or a checkpoint for this job.
    let spoke = false;
    const handlers: TrainerHandlers = {
      onStdoutLine: (line) => {
        const parsed = parseTrainerLine(line);
        if (parsed.kind === 'job_end') {
          // A resident trainer is done with this job and waits for the next: its exit code is the job's.
          if (parsed.specPath !== specPath) {
            trainerLog.warn({ line }, 'job_end for another job spec; ignored');
            return;
          }
          if (Object.keys(parsed.usage).length) trainerLog.info(parsed.usage, 'trainer job ended');
          endOnStdout = { code: parsed.exitCode, signal: null };
          if (endOnStderr) endJob(endOnStdout);
          else stderrWait = setTimeout(() => endJob(endOnStdout!), 1000);
          return;
        }
        if (parsed.kind === 'other') {
          if (parsed.problem) trainerLog.warn({ line, problem: parsed.problem }, 'trainer line ignored');
          else trainerLog.info({ stream: 'stdout' }, line);
          return;
        }
        spoke = true;
        if (parsed.dropped.length) trainerLog.warn({ dropped: parsed.dropped }, 'values the server would refuse (not finite numbers, or past its bounds) were dropped');
        if (parsed.kind === 'checkpoint') {
          checkpoint = parsed.checkpoint;
          return;
        }
        const { events, note } = order.admit(parsed.event);
        if (note) trainerLog.warn(note);
        if (events.length && !this.leaseLost) batcher.push(...events);
      },
      onStderrLine: (line) => {
        if (!isOurJobEnd(line)) return trainerLog.info({ stream: 'stderr' }, line);
        endOnStderr = true;
        if (endOnStdout) {
          clearTimeout(stderrWait);
          endJob(endOnStdout);
        }
      },
      onLongLine: warnLongLine(trainerLog),
    };
    const startProcess = () => {
      const started = new TrainerProcess({
        command: this.settings.command,
        specPath,
        env: this.settings.trainerEnv,
        resident: this.settings.resident,
        groupGraceMs: this.settings.cancelGraceMs,
        ...handlers,
      });
      this.log.info({ pid: started.pid, command: this.settings.command }, 'trainer started');
      return started;
    };
    let trainer = this.resident?.take();
    const handed = trainer !== undefined;
    if (trainer) {
      trainer.attach(handlers);
      trainer.startJob(specPath);
      this.log.info({ pid: trainer.pid }, 'job handed to the resident trainer');
    } else {
      trainer = startProcess();
    }

    const stopped = new Promise<'stopped'>((resolve) => {
      if (this.stopping.signal.aborted) resolve('stopped');
      this.stopping.signal.addEventListener('abort', () => resolve('stopped'), { once: true });
    });
    const ended = jobEnded.then((exit) => ({ ...exit, resident: true }));
    let exit: (TrainerExit & { resident?: boolean }) | 'stopped' = await Promise.race([trainer.exited, ended, stopped]);
    if (handed && exit !== 'stopped' && !exit.resident && !spoke) {
      // The resident process was on its way out (it exited between jobs, just after this one was handed to
      // it): it never took the job, so the job runs in a process of its own, as if none had been resident.
      this.log.warn({ code: exit.code, signal: exit.signal }, 'the resident trainer exited before it took the job; starting a new one');
      trainer = startProcess();
      exit = await Promise.race([trainer.exited, ended, stopped]);
    }
    clearTimeout(stderrWait);
    if (exit === 'stopped') {
      // A resident trainer is stopped like any other: its next job starts a new process.
      this.log.info({ reason: this.stopReason, grace_ms: this.settings.cancelGraceMs }, 'stopping the trainer');
      exit = await trainer.terminate(this.settings.cancelGraceMs);
    }
    if (exit.resident && !this.stopReason && (exit.code === 0 || exit.code === PERMANENT_FAILURE_EXIT_CODE) && this.resident) {
      this.log.info({ code: exit.code }, 'trainer finished the job and stays resident');
      const { model } = this.claim.job;
      // A job that failed for good (3) leaves no adapter in a trainer that follows the contract.
      this.resident.keep(trainer, { base_model: model.base_model, model_id: exit.code === 0 ? model.id : null });
    } else if (exit.resident) {
      // A job_end with another code, or one this worker cannot keep: the process is not trusted with another job.
      // The job is reported at once; run() waits for the process to be gone before the slot claims its next.
      this.log.info({ code: exit.code }, 'trainer finished the job; stopping it');
      this.releasing = trainer.release(this.settings.cancelGraceMs);
    } else {
      this.log.info({ code: exit.code, signal: exit.signal }, 'trainer exited');
    }

    const stderrTail = trainer.stderrTail(STDERR_TAIL_CHARS);
    if (exit.code === UNFIT_MACHINE_EXIT_CODE) {
      // Before the report requeues the job: this worker must not claim it, or any other, again.
      const reason = stderrTail.trimEnd().split('\n').at(-1) || 'the trainer gave no reason on stderr';
      this.onUnfitMachine?.(reason);
    }
    if (this.leaseLost) batcher.discard();
    else await batcher.flush();
    return this.report(exit, { checkpoint, stderrTail });
  }

  /** Decides and sends the report of the attempt. `exit` is undefined when the trainer never ran. */
  private async report(
    exit: TrainerExit | undefined,
    output: { checkpoint: { uri: string; metrics: Record<string, number> } | undefined; stderrTail: string } | undefined,
  ): Promise<JobOutcome> {
    if (this.leaseLost) {
      this.log.warn('lease lost; the job is no longer ours and nothing is reported');
      return unreported('lease lost');
    }
    if (this.stopReason === 'cancel') {
      const sent = await this.send(() => this.client.fail(this.jobId, this.leaseToken, CANCELED_MESSAGE, false));
      this.log.info('job canceled');
      return sent.ok ? { status: 'canceled' } : unreported(sent.reason);
    }
    if (this.stopReason === 'interrupt') {
      const message = `worker ${this.settings.workerId} shut down before the job finished`;
      const sent = await this.send(() => this.client.fail(this.jobId, this.leaseToken, message, true));
      this.log.info('job interrupted; failed as retryable');
      return sent.ok ? { status: 'interrupted' } : unreported(sent.reason);
    }
    if (!exit || !output) return this.reportFailure('the job was stopped before its trainer ran', true);

    const tail = output.stderrTail.trimEnd();
    if (exit.spawnError) return this.reportFailure(`could not start the trainer command: ${exit.spawnError.message}`, true);
    if (exit.code === 0) {
      if (!output.checkpoint) {
        return this.reportFailure('trainer command exited 0 without reporting a checkpoint', false, tail);
      }
      const checkpoint = output.checkpoint;
      const sent = await this.send(() => this.client.complete(this.jobId, this.leaseToken, checkpoint));
      // A refused checkpoint (a URI outside the server's CHECKPOINT_URI_PREFIXES, say) is refused again on
      // every attempt: fail the job for good rather than let the lease lapse into a retry.
      if (!sent.ok && sent.refused) return this.reportFailure(`the server refused the checkpoint ${checkpoint.uri}: ${sent.reason}`, false);
      // Canceled while the trainer was finishing: the server ended the job without a checkpoint, and no
      // attempt of it runs again, so what the trainer wrote is no one's (run() removes it).
      if (!sent.ok && sent.canceled) {
        this.log.info('job canceled while its trainer was finishing; the checkpoint was not registered');
        return { status: 'canceled' };
      }
      if (!sent.ok) return unreported(sent.reason);
      const registered = sent.value.checkpoint;
      this.log.info({ checkpoint_id: registered.id, step: registered.step, uri: checkpoint.uri }, 'job completed');
      return { status: 'completed', checkpointId: registered.id, step: registered.step };
    }
    if (exit.code === PERMANENT_FAILURE_EXIT_CODE) {
      return this.reportFailure(`trainer command exited with code ${exit.code} (permanent failure)`, false, tail);
    }
    if (exit.code === UNFIT_MACHINE_EXIT_CODE) {
      return this.reportFailure(`trainer command exited with code ${exit.code} (worker ${this.settings.workerId} cannot run the trainer)`, true, tail);
    }
    const how = exit.code === null ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
    return this.reportFailure(`trainer command ${how}`, true, tail);
  }

  /**
   * Fails the attempt with `message`, followed by the trainer's stderr tail when there is one, made into text
   * the server stores (storableText). Should the server refuse it all the same, the failure goes once more
   * with a plain message, so that the attempt still ends now rather than when its lease lapses.
   */
  private async reportFailure(message: string, retryable: boolean, stderrTail = ''): Promise<JobOutcome> {
    const full = storableText(stderrTail ? `${message}; stderr tail:\n${stderrTail}` : message, ERROR_MESSAGE_CHARS);
    let reported = full;
    let sent = await this.send(() => this.client.fail(this.jobId, this.leaseToken, full, retryable));
    if (!sent.ok && sent.refused) {
      reported = stderrTail
        ? storableText(message, ERROR_MESSAGE_CHARS)
        : `the attempt failed; the server refused its error message (see the log of worker ${this.settings.workerId})`;
      this.log.warn({ refused_message: full }, 'failing the attempt again with a plain message');
      sent = await this.send(() => this.client.fail(this.jobId, this.leaseToken, reported, retryable));
    }
    if (!sent.ok) return unreported(sent.reason);
    this.log.warn({ retryable, error_message: reported }, 'job failed');
    return { status: 'failed', retryable, message: reported };
  }

  /**
   * A report call. Not ok when it could not be made: the lease is gone (409; a job canceled while its
   * trainer was finishing answers complete this way too, and `canceled` says so), or the server stayed away
   * past the retries, in which case the server's lease sweep ends the attempt as a retryable failure.
   * `refused`: the server answered a 4xx that retrying cannot change.
   */
  private async send<T>(call: () => Promise<T>): Promise<{ ok: true; value: T } | { ok: false; reason: string; refused: boolean; canceled: boolean }> {
    try {
      return { ok: true, value: await call() };
    } catch (error) {
      const reason = (error as Error).message;
      const refused = error instanceof ProtocolError && error.status >= 400 && error.status < 500;
      if (error instanceof LeaseLostError) {
        this.stop('lease_lost');
        this.log.warn({ err: reason }, 'lease lost while reporting the job');
      } else if (refused) {
        this.log.warn({ err: reason }, 'the server refused the report');
      } else {
        this.log.error({ err: reason }, 'could not report the job; its lease will lapse');
      }
      return { ok: false, reason, refused, canceled: error instanceof LeaseLostError && error.canceled };
    }
  }

  private stop(reason: StopReason): void {
    if (reason === 'lease_lost') this.leaseLost = true;
    if (this.stopReason) return;
    this.stopReason = reason;
    this.stopping.abort();
  }

  /**
   * Renews the lease until the attempt is reported; reads `cancel_requested` on the way. A heartbeat waits for
   * its answer about one interval, and is retried until the lease expires: one that never gets an answer (lost
   * on the way, a server gone without closing its connections) must not hold the next ones back past it.
   */
  private async heartbeatLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted && !this.leaseLost) {
      try {
        const interval = this.heartbeatInterval();
        await sleep(interval, undefined, { signal });
        if (performance.now() >= this.leaseEndsAt) {
          // No heartbeat got through while the lease lasted (the server unreachable, say): the server sweeps
          // the job into a retry, which may write the same output directory. Ours stops training for nobody.
          this.log.error({ lease_expired_at: this.leaseExpiresAt }, 'the lease lapsed without renewal; stopping the trainer');
          this.stop('lease_lost');
          return;
        }
        const limits = { timeoutMs: Math.max(interval, MIN_HEARTBEAT_TIMEOUT_MS), retryForMs: this.leaseEndsAt - performance.now() };
        const { answer: beat, leaseEndsAt } = await this.client.heartbeat(this.jobId, this.leaseToken, limits, signal);
        this.leaseExpiresAt = beat.expires_at;
        this.leaseEndsAt = leaseEndsAt;
        if (beat.cancel_requested && !this.stopReason) {
          this.log.info('cancel requested');
          this.stop('cancel');
        }
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof LeaseLostError) this.stop('lease_lost');
        else this.log.warn({ err: (error as Error).message }, 'heartbeat failed');
      }
    }
  }

  private heartbeatInterval(): number {
    if (this.settings.heartbeatMs !== undefined) return this.settings.heartbeatMs;
    // A third of what is left of the lease, so that two heartbeats may fail before it lapses.
    const left = this.leaseEndsAt - performance.now();
    return Math.min(20_000, Math.max(500, left / 3));
  }
}

function unreported(reason: string): JobOutcome {
  return { status: 'unreported', reason };
}
