/**
 * A circuit breaker per replica: after `failureThreshold` consecutive failures the replica is skipped
 * for `openMs`, then one probe request is let through; its outcome closes or reopens the circuit.
 * Only the engine's own failures count (connect errors, timeouts, 5xx), never a client's 4xx.
 */
export interface BreakerOptions {
  failureThreshold: number;
  openMs: number;
}

export const DEFAULT_BREAKER: BreakerOptions = { failureThreshold: 5, openMs: 10_000 };

export type BreakerState = 'closed' | 'open' | 'half-open';

export class CircuitBreaker {
  private failures = 0;
  private openedAt = 0;
  private probing = false;

  constructor(
    private readonly options: BreakerOptions,
    private readonly now: () => number = Date.now,
  ) {}

  get state(): BreakerState {
    if (this.failures < this.options.failureThreshold) return 'closed';
    return this.now() - this.openedAt >= this.options.openMs ? 'half-open' : 'open';
  }

  /** Milliseconds until an open circuit lets a probe through (0 when it would now). */
  reopensInMs(): number {
    return this.state === 'open' ? this.options.openMs - (this.now() - this.openedAt) : 0;
  }

  /** Whether a request may go to this replica now; a half-open breaker admits one probe at a time. */
  canPass(): boolean {
    const state = this.state;
    return state === 'closed' || (state === 'half-open' && !this.probing);
  }

  /** Called when a request is sent; marks the half-open probe as taken. */
  onSend(): void {
    if (this.state === 'half-open') this.probing = true;
  }

  onSuccess(): void {
    this.failures = 0;
    this.probing = false;
  }

  /** The request ended with no verdict (the client left): free the probe slot for another request. */
  onAbandon(): void {
    this.probing = false;
  }

  onFailure(): void {
    this.failures += 1;
    this.probing = false;
    if (this.failures >= this.options.failureThreshold) this.openedAt = this.now();
  }
}
