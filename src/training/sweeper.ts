import type { FastifyBaseLogger } from 'fastify';

/**
 * Background work of the training API, one timer each: the lease sweep (ends the attempts of workers that
 * stopped renewing their lease: requeued with attempts left, else FAILED; CANCELED when a cancel was
 * asked) and the checkpoint expiry sweep (deletes checkpoints whose TTL passed, and forgets deleted
 * checkpoints kept as page cursors for a day). Every process runs them; both skip or tolerate rows another
 * process handles, so they never end an attempt or release a checkpoint twice. Runs of one sweeper never
 * overlap in a process.
 */
export class Sweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly name: string,
    private readonly sweep: () => Promise<void>,
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
      await this.sweep();
    } catch (error) {
      this.log.error({ err: error }, `${this.name} failed`);
    }
  }
}
