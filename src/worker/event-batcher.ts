import type { WorkerEvent } from '../training/schemas.js';

export interface EventBatcherOptions {
  /** How long the first queued event may wait for others to join its batch. */
  windowMs: number;
  /** The most events one call carries (the server takes up to 1000). */
  maxBatch?: number;
  send(events: WorkerEvent[]): Promise<void>;
  /** A batch that could not be sent; it is dropped, later batches still go. */
  onError(error: unknown, events: WorkerEvent[]): void;
}

/**
 * Collects a trainer's events and posts them in batches: at most one call per window while events
 * arrive, batches strictly in order and never two calls at once (the server checks the order of
 * `training_started` and `gradient_step` across calls).
 */
export class EventBatcher {
  private queue: WorkerEvent[] = [];
  private timer: NodeJS.Timeout | undefined;
  private chain: Promise<void> = Promise.resolve();
  private readonly maxBatch: number;

  constructor(private readonly options: EventBatcherOptions) {
    this.maxBatch = options.maxBatch ?? 1000;
  }

  push(...events: WorkerEvent[]): void {
    this.queue.push(...events);
    if (this.queue.length >= this.maxBatch) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.options.windowMs);
  }

  /** Sends everything queued so far; resolves once it and every earlier batch have been sent or dropped. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.chain = this.chain.then(() => this.options.send(batch)).catch((error: unknown) => this.options.onError(error, batch));
    }
    return this.chain;
  }

  /** Forgets what is queued (the lease is gone: nothing more can be posted). */
  discard(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue = [];
  }
}
