import path from 'node:path';
import { fileURLToPath } from 'node:url';
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
  if (uri.startsWith('file:') && fileUriPath(uri) === undefined) {
    return 'a file: URI must name a local path, percent-encoded as pathToFileURL writes it (% as %25, # as %23), with no query or fragment';
  }
  const segments = uri.replace(/%2e/gi, '.').split(/[/\\]|%2f|%5c/i);
  if (segments.some((segment) => segment === '.' || segment === '..')) return 'it must not contain "." or ".." path segments';
  return null;
}

/** A local directory path from a checkpoint URI, or undefined when the URI names other storage (or no path for sure). */
export function localAdapterPath(uri: string): string | undefined {
  if (uri.startsWith('file:')) return fileUriPath(uri);
  return path.isAbsolute(uri) ? uri : undefined;
}

/**
 * The local path a `file:` URI names, or undefined when it names none for sure: another host, a broken
 * escape, or a `?` or `#`, which would make the rest a query or fragment and name another directory.
 */
export function fileUriPath(uri: string): string | undefined {
  if (uri.includes('?') || uri.includes('#')) return undefined;
  try {
    return fileURLToPath(uri);
  } catch {
    return undefined;
  }
}
