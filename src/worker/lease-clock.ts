/**
 * Times a lease on this machine's monotonic clock (performance.now()). A lease's `expires_at` is a time on
 * the server's clock, and the machines' clocks need not agree (docs/worker-runtime.md): compared with this
 * machine's wall clock, a lease would lapse early by however far this clock runs ahead of the server's (every
 * job killed at its first heartbeat tick once that is more than a lease), or late by however far it lags.
 */

/** A server's clock and this machine's that differ by more than this are worth a warning. */
export const CLOCK_SKEW_WARN_MS = 5_000;

/** An answer that carries a lease (claim, heartbeat), with what the worker saw of it on arrival. */
export interface LeaseAnswer {
  expires_at: string;
  /** How long the lease lasts from this answer; absent from servers that do not send it. */
  expires_in_ms?: number;
  /** The answer's HTTP `Date` header: the server's clock, to the second. */
  date: string | undefined;
  /** When the answer arrived, on this machine's monotonic clock (performance.now()) and wall clock (Date.now()). */
  arrived: { monotonic: number; wall: number };
}

export interface LeaseTiming {
  /** When the lease lapses, on performance.now()'s clock. */
  endsAt: number;
  /** How far the server's clock runs ahead of this machine's (negative: behind), in ms; undefined when the answer does not say. */
  serverAheadMs: number | undefined;
}

export function timeLease(answer: LeaseAnswer): LeaseTiming {
  const expiresAt = Date.parse(answer.expires_at);
  const date = answer.date === undefined ? NaN : Date.parse(answer.date);
  let leftMs: number;
  let serverNow: number | undefined;
  if (answer.expires_in_ms !== undefined) {
    // The server renewed the lease for expires_in_ms a moment before it answered: timed from the arrival, it
    // ends later than on the server by that moment and the way back (milliseconds, well within the lease sweep's interval).
    leftMs = answer.expires_in_ms;
    serverNow = Number.isFinite(expiresAt) ? expiresAt - answer.expires_in_ms : undefined;
  } else if (Number.isFinite(date)) {
    // An older server: its Date header is cut to the second, so its clock read up to 1 s more than it says.
    leftMs = expiresAt - date - 1000;
    serverNow = date + 500;
  } else {
    // Neither (a proxy that drops Date): this machine's wall clock is all there is.
    leftMs = expiresAt - answer.arrived.wall;
  }
  return {
    endsAt: answer.arrived.monotonic + leftMs,
    serverAheadMs: serverNow === undefined ? undefined : serverNow - answer.arrived.wall,
  };
}
