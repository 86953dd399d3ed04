import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import type { Logger } from 'pino';
import { checkpointUriProblem } from '../training/protocol.js';
import type { WorkerSettingsResponse } from '../training/schemas.js';
import { ProtocolError, WorkerClient } from './client.js';
import { JobDirWatch, removeStaleJobDirs } from './job-files.js';
import { JobRun, UNFIT_MACHINE_EXIT_CODE, type JobOutcome } from './job-run.js';
import type { WorkerOptions } from './options.js';
import { ResidentTrainerSlot } from './resident.js';
import { StorageReleaser } from './storage-releases.js';

/** How often the work dir is looked through for job directories of workers that are gone. */
const JOB_DIR_SWEEP_MS = 5 * 60_000;

export type WorkerSettings = Pick<
  WorkerOptions,
  | 'serverUrl'
  | 'key'
  | 'command'
  | 'kinds'
  | 'baseModels'
  | 'concurrency'
  | 'workDir'
  | 'outputDir'
  | 'releaseMs'
  | 'workerId'
  | 'cancelGraceMs'
  | 'drainMs'
  | 'heartbeatMs'
  | 'eventWindowMs'
  | 'pollSeconds'
  | 'trainerEnv'
  | 'resident'
>;

/**
 * The trainer worker: `concurrency` slots, each claiming a job (long-poll), running it to its report and
 * claiming again, and every `releaseMs` a sweep that deletes the output directories of deleted checkpoints;
 * at start and every JOB_DIR_SWEEP_MS, the job directories that workers killed before they could clean up
 * left in the work dir are removed.
 * `drain()` stops claiming and lets running jobs finish for `drainMs`, then interrupts
 * them (their trainers are stopped and the attempts failed as retryable, so another worker takes them).
 * A trainer that exits with UNFIT_MACHINE_EXIT_CODE drains the worker too, and `run()` then rejects.
 */
export class Worker {
  private readonly client: WorkerClient;
  private readonly claims = new AbortController();
  private readonly running = new Set<JobRun>();
  private readonly residents = new Set<ResidentTrainerSlot>();
  /**
   * Checkpoint directories of the jobs running when the current storage sweep began or started since: not
   * deleted by that sweep. A job that ends during it may have registered its directory again (a deleted step
   * trained anew), which the server then no longer lists, but the sweep's page was read before.
   */
  private readonly inUse = new Set<string>();
  private draining = false;
  private drainTimer: NodeJS.Timeout | undefined;
  private fatal: Error | undefined;

  constructor(
    private readonly settings: WorkerSettings,
    private readonly logger: Logger,
    private readonly onJobEnd?: (jobId: string, outcome: JobOutcome) => void,
  ) {
    this.client = new WorkerClient({ serverUrl: settings.serverUrl, key: settings.key, logger });
  }

  /** Runs until drained; rejects when the server refuses this worker (a bad key, say). */
  async run(): Promise<void> {
    await fs.mkdir(this.settings.workDir, { recursive: true });
    await fs.mkdir(this.settings.outputDir, { recursive: true });
    this.logger.info(
      { worker_id: this.settings.workerId, server: this.settings.serverUrl, concurrency: this.settings.concurrency, kinds: this.settings.kinds, base_models: this.settings.baseModels },
      'worker started',
    );
    try {
      await Promise.all([
        ...Array.from({ length: this.settings.concurrency }, () => this.slot()),
        this.checkOutputDir(),
        this.releaseStorage(),
        this.sweepJobDirs(),
      ]);
    } finally {
      clearTimeout(this.drainTimer);
      await this.client.close();
    }
    if (this.fatal) throw this.fatal;
    this.logger.info('worker stopped');
  }

  /** Stop claiming; running jobs get `drainMs` to finish before they are interrupted. Safe to call twice. */
  drain(): void {
    if (this.draining) return;
    this.draining = true;
    this.claims.abort();
    this.logger.info({ running: this.running.size, drain_ms: this.settings.drainMs }, 'draining: no new claims');
    if (this.running.size > 0) this.drainTimer = setTimeout(() => this.interruptAll(), this.settings.drainMs);
  }

  /** Stop claiming and interrupt running jobs now (a second SIGTERM). */
  stopNow(): void {
    this.drain();
    this.interruptAll();
  }

  get runningJobs(): number {
    return this.running.size;
  }

  /**
   * The trainer said this machine cannot run it (UNFIT_MACHINE_EXIT_CODE): every job claimed here would fail
   * the same way, so no more are claimed, the running ones finish as on a drain, and `run()` rejects (exit 1)
   * for a supervisor or an operator to notice.
   */
  private stopOnUnfitMachine(jobId: string, reason: string): void {
    this.logger.error(
      { job_id: jobId, reason },
      `the trainer exited with code ${UNFIT_MACHINE_EXIT_CODE}: this machine cannot run it (${reason}); no more jobs are claimed, and the worker stops once its running jobs are done`,
    );
    this.fatal ??= new Error(`the trainer cannot run on this machine (it exited with code ${UNFIT_MACHINE_EXIT_CODE}): ${reason}`);
    this.drain();
  }

  private interruptAll(): void {
    if (this.running.size > 0) this.logger.warn({ running: this.running.size }, 'interrupting running jobs');
    for (const job of this.running) job.interrupt();
  }

  /**
   * Warns at start when the server would refuse the checkpoints written under --output-dir: otherwise that
   * is found only when the first job ends, its training lost. A warning, not a refusal: a trainer may
   * report a URI elsewhere (an s3:// upload, say). A key the server refuses is the claims' to report.
   */
  private async checkOutputDir(): Promise<void> {
    let server: WorkerSettingsResponse | undefined;
    try {
      server = await this.client.settings(this.claims.signal);
    } catch (error) {
      if (!this.draining) this.logger.debug({ err: (error as Error).message }, 'could not read the server\'s worker settings');
      return;
    }
    if (!server) return;
    const directory = this.settings.outputDir.endsWith(path.sep) ? this.settings.outputDir : this.settings.outputDir + path.sep;
    const prefixes = server.checkpoint_uri_prefixes;
    // The reference trainer reports the path; a trainer may report it as a file:// URI instead.
    if (checkpointUriProblem(directory, prefixes) === null || checkpointUriProblem(pathToFileURL(directory).href, prefixes) === null) {
      this.logger.debug({ output_dir: this.settings.outputDir, checkpoint_uri_prefixes: prefixes }, 'the server registers checkpoints under --output-dir');
      return;
    }
    this.logger.warn(
      { output_dir: this.settings.outputDir, checkpoint_uri_prefixes: prefixes },
      `--output-dir ${directory} lies under none of the server's CHECKPOINT_URI_PREFIXES (${prefixes.join(', ')}): ` +
        'a checkpoint written there is refused when its job ends, and the job fails. ' +
        `Add ${directory} to CHECKPOINT_URI_PREFIXES on the server, or choose an --output-dir under one of them.`,
    );
  }

  /** Until drained: a sweep of the storage releases at start, then every `releaseMs` (0: none). */
  private async releaseStorage(): Promise<void> {
    if (this.settings.releaseMs <= 0) return;
    const releaser = new StorageReleaser(this.client, this.settings.outputDir, this.logger, () => this.inUse);
    while (!this.draining) {
      this.inUse.clear();
      for (const job of this.running) for (const directory of job.checkpointDirectories) this.inUse.add(directory);
      try {
        await releaser.sweep(this.claims.signal);
      } catch (error) {
        if (this.draining) return;
        this.logger.warn({ err: (error as Error).message }, 'could not go through the storage releases; trying again later');
      }
      await sleep(this.settings.releaseMs, undefined, { signal: this.claims.signal }).catch(() => undefined);
    }
  }

  /** Until drained: removes the job directories of workers that are gone (job-files.ts), at start and every JOB_DIR_SWEEP_MS. */
  private async sweepJobDirs(): Promise<void> {
    const watch = new JobDirWatch();
    while (!this.draining) {
      try {
        const removed = await removeStaleJobDirs(this.settings.workDir, watch);
        if (removed.length) this.logger.info({ removed }, 'removed job directories of workers that are gone');
      } catch (error) {
        this.logger.warn({ err: (error as Error).message }, 'could not look for job directories of workers that are gone');
      }
      await sleep(JOB_DIR_SWEEP_MS, undefined, { signal: this.claims.signal }).catch(() => undefined);
    }
  }

  private async slot(): Promise<void> {
    // One device set per slot: its resident trainer serves the slot's jobs one after another.
    const resident = new ResidentTrainerSlot(this.logger);
    this.residents.add(resident);
    try {
      await this.claimAndRun(resident);
    } finally {
      await resident.close(this.settings.cancelGraceMs);
    }
  }

  private async claimAndRun(resident: ResidentTrainerSlot): Promise<void> {
    while (!this.draining) {
      let claim;
      try {
        claim = await this.client.claim(
          {
            worker_id: this.settings.workerId,
            kinds: this.settings.kinds ? [...this.settings.kinds] : undefined,
            base_models: this.settings.baseModels ? [...this.settings.baseModels] : undefined,
            wait_seconds: this.settings.pollSeconds,
            resident_trainers: [...this.residents].flatMap((slot) => (slot.holds ? [slot.holds] : [])),
          },
          this.claims.signal,
        );
      } catch (error) {
        if (this.draining) return;
        // Not transient (those are retried inside): the key is wrong or revoked, or the server speaks another protocol.
        this.fatal = error instanceof ProtocolError ? new Error(`the server refused the claim: ${error.message}`) : (error as Error);
        this.logger.error({ err: this.fatal.message }, 'cannot claim jobs; stopping');
        this.drain();
        return;
      }
      if (!claim) {
        if (this.settings.pollSeconds < 1) await sleep(1000, undefined, { signal: this.claims.signal }).catch(() => {});
        continue;
      }
      const job = new JobRun(claim, this.client, this.settings, this.logger, resident, (reason) => this.stopOnUnfitMachine(claim.answer.job.id, reason));
      // Only a storage sweep reads (and clears) the set: without sweeps it would only grow.
      if (this.settings.releaseMs > 0) for (const directory of job.checkpointDirectories) this.inUse.add(directory);
      // A claim answered just as draining began: start it only to hand it back at once.
      if (this.draining) job.interrupt();
      this.running.add(job);
      try {
        const outcome = await job.run();
        this.onJobEnd?.(job.jobId, outcome);
      } catch (error) {
        this.logger.error({ job_id: job.jobId, err: (error as Error).message }, 'job run crashed');
      } finally {
        this.running.delete(job);
        if (this.draining && this.running.size === 0) clearTimeout(this.drainTimer);
      }
    }
  }
}
