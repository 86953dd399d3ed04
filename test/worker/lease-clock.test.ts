import { describe, expect, it } from 'vitest';
import { timeLease } from '../../src/worker/lease-clock.js';

/** The server's clock reads 12:00:00.400 when it renews a 60 s lease; this machine's wall clock is 120 s ahead. */
const SERVER_NOW = Date.parse('2026-03-01T12:00:00.400Z');
const EXPIRES_AT = new Date(SERVER_NOW + 60_000).toISOString();
const ARRIVED = { monotonic: 5_000, wall: SERVER_NOW + 120_000 };

describe('timing a lease on this machine\'s monotonic clock', () => {
  it('takes how long the lease lasts from expires_in_ms, from the answer\'s arrival', () => {
    expect(timeLease({ expires_at: EXPIRES_AT, expires_in_ms: 60_000, date: 'Sun, 01 Mar 2026 12:00:00 GMT', arrived: ARRIVED })).toEqual({
      endsAt: 65_000,
      serverAheadMs: -120_000,
    });
  });

  it('without expires_in_ms (an older server) takes it from the Date header, a second short for the header\'s resolution', () => {
    expect(timeLease({ expires_at: EXPIRES_AT, date: 'Sun, 01 Mar 2026 12:00:00 GMT', arrived: ARRIVED })).toEqual({
      endsAt: 5_000 + 60_400 - 1_000,
      serverAheadMs: 500 - 120_400,
    });
  });

  it('without either falls back to this machine\'s wall clock, and cannot tell the clocks apart', () => {
    expect(timeLease({ expires_at: EXPIRES_AT, date: undefined, arrived: { monotonic: 5_000, wall: SERVER_NOW + 1_000 } })).toEqual({
      endsAt: 5_000 + 59_000,
      serverAheadMs: undefined,
    });
  });
});
