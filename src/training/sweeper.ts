import type { FastifyBaseLogger } from 'fastify';
import type { StoredJob } from './repository.js';

/**
 * Ends the attempts of workers that stopped renewing their lease: every interval, one sweep (requeue with
 * attempts left, else FAILED; CANCELED when a cancel was asked). Every process runs one; the sweep skips
 * rows another process holds, so they never end the same attempt twice. Sweeps never overlap in a process.
 */
export class LeaseSweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly sweep: () => Promise<StoredJob[]>,
    private readonly intervalMs: number,
    private readonly log: FastifyBaseLogger,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      if (!this.running) this.running = this.runOnce().finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Stops the timer and waits for a sweep in progress, so the database can close after it. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private async runOnce(): Promise<void> {
    try {
      const ended = await this.sweep();
      for (const job of ended) {
        this.log.warn({ job_id: job.id, status: job.status, attempt: job.attempt }, 'training job lease expired');
      }
    } catch (error) {
      this.log.error({ err: error }, 'lease sweep failed');
    }
  }
}
