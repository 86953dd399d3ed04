/**
 * Wakes waiters in this process when what they watch may have changed; the database stays the one source
 * of truth. The training plugin holds two: one wakes long-polling claims when a job may have become
 * claimable (one was queued, requeued, or a model's running job ended so its next one may go), with other
 * processes' changes reaching it through the worker service's watch loop, which reads the queue once a
 * second while claims wait (worker-service.ts); the other wakes job event streams when a job's events or
 * status changed, which also read again every second (event-stream.ts).
 */
export class JobSignal {
  private readonly waiters = new Set<() => void>();
  private generation = 0;
  private closed = false;

  /** A number that changes on every notify: a claim that read it before querying can tell it missed one. */
  get version(): number {
    return this.generation;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  notify(): void {
    this.generation++;
    for (const wake of [...this.waiters]) wake();
  }

  /** Ends every wait now and every later one at once (the app is closing). */
  close(): void {
    this.closed = true;
    this.notify();
  }

  /**
   * Resolves after `ms`, on the next notify, on abort, or at once when a notify happened since `seen` was read
   * or the signal is closed.
   */
  wait(ms: number, seen: number, abort?: AbortSignal): Promise<void> {
    if (this.closed || seen !== this.generation || abort?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        abort?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
      abort?.addEventListener('abort', done, { once: true });
    });
  }
}
