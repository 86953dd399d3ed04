import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { WorkerEvent } from '../../src/training/schemas.js';
import { EventBatcher } from '../../src/worker/event-batcher.js';

const step = (n: number): WorkerEvent => ({ type: 'gradient_step', data: { step: n } });

describe('EventBatcher', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  function recording(send?: (events: WorkerEvent[]) => Promise<void>) {
    const sent: WorkerEvent[][] = [];
    const errors: unknown[] = [];
    const batcher = new EventBatcher({
      windowMs: 100,
      maxBatch: 3,
      send: async (events) => {
        sent.push(events);
        await send?.(events);
      },
      onError: (error) => errors.push(error),
    });
    return { batcher, sent, errors };
  }

  it('sends the events of one window as one batch when the window closes', async () => {
    const { batcher, sent } = recording();
    batcher.push(step(1));
    await vi.advanceTimersByTimeAsync(50);
    batcher.push(step(2));
    expect(sent).toEqual([]);
    await vi.advanceTimersByTimeAsync(50);
    expect(sent).toEqual([[step(1), step(2)]]);
  });

  it('sends at once when a batch is full, in batches of at most maxBatch', async () => {
    const { batcher, sent } = recording();
    batcher.push(step(1), step(2), step(3), step(4));
    await vi.advanceTimersByTimeAsync(0);
    expect(sent).toEqual([[step(1), step(2), step(3)], [step(4)]]);
  });

  it('never has two calls in flight and keeps the order', async () => {
    let inFlight = 0;
    let most = 0;
    const { batcher, sent } = recording(async () => {
      most = Math.max(most, ++inFlight);
      await new Promise((resolve) => setTimeout(resolve, 30));
      inFlight--;
    });
    for (let n = 1; n <= 7; n++) batcher.push(step(n));
    const done = batcher.flush();
    await vi.advanceTimersByTimeAsync(200);
    await done;
    expect(most).toBe(1);
    expect(sent.flat()).toEqual([1, 2, 3, 4, 5, 6, 7].map(step));
  });

  it('flush sends what is queued without waiting for the window', async () => {
    const { batcher, sent } = recording();
    batcher.push(step(1));
    await batcher.flush();
    expect(sent).toEqual([[step(1)]]);
  });

  it('reports a batch that failed and still sends the next ones', async () => {
    const { batcher, sent, errors } = recording(async (events) => {
      if (events[0] === first) throw new Error('boom');
    });
    const first = step(1);
    batcher.push(first);
    await batcher.flush();
    batcher.push(step(2));
    await batcher.flush();
    expect(errors).toHaveLength(1);
    expect(sent).toEqual([[first], [step(2)]]);
  });

  it('discard forgets queued events', async () => {
    const { batcher, sent } = recording();
    batcher.push(step(1));
    batcher.discard();
    await vi.advanceTimersByTimeAsync(500);
    await batcher.flush();
    expect(sent).toEqual([]);
  });
});
