import type { WorkerEvent } from './schemas.js';

/**
 * The order rule for events a worker posts: `training_started` first and once per attempt, because the ART
 * client asserts it has seen one before any `gradient_step` and reads `num_sequences` from it (reference §3.9).
 * Returns the index of the first offending event and why, or null when the batch may be appended.
 */
export function checkWorkerEvents(
  events: readonly WorkerEvent[],
  startedBefore: boolean,
): { index: number; message: string } | null {
  let started = startedBefore;
  for (const [index, event] of events.entries()) {
    if (event.type === 'training_started') {
      if (started) return { index, message: 'training_started was already posted for this attempt' };
      started = true;
    } else if (!started) {
      return { index, message: `${event.type} must come after training_started` };
    }
  }
  return null;
}
