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

/**
 * Why a worker may not register this checkpoint URI, or null. The inference engines load whatever a
 * checkpoint's URI names, so it must lie under one of the operator's prefixes (CHECKPOINT_URI_PREFIXES),
 * with no `.` or `..` segment (percent-encoded or not) to climb out of it.
 */
export function checkpointUriProblem(uri: string, prefixes: readonly string[]): string | null {
  if (!prefixes.some((prefix) => uri.startsWith(prefix))) {
    return `it must start with one of ${prefixes.join(', ')} (CHECKPOINT_URI_PREFIXES)`;
  }
  const segments = uri.replace(/%2e/gi, '.').split(/[/\\]|%2f|%5c/i);
  if (segments.some((segment) => segment === '.' || segment === '..')) return 'it must not contain "." or ".." path segments';
  return null;
}
