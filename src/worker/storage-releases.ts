import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { RELEASES_PER_CALL } from '../training/lifecycle-schemas.js';
import { localAdapterPath } from '../training/protocol.js';
import type { WorkerClient } from './client.js';

/**
 * Deletes the storage of deleted checkpoints that this worker's trainers wrote, or those of workers sharing its
 * output directory (docs/worker-runtime.md, "Checkpoint storage"). The server lists the URIs of deleted
 * checkpoints; each one that names a checkpoint directory of this worker's layout under its output directory
 * (`<output-dir>/<model id>/step-<N>`, as a path or a file:// URL) is deleted and acknowledged, and so is one
 * already gone, provided the output directory is known to be the storage trainers write to (see
 * STORAGE_MARKER). Every other URI (s3://, another directory) is someone else's storage: it is left
 * unacknowledged for them, and paged past.
 */
export class StorageReleaser {
  /** Releases after this id were not looked at yet, or must be again; those before were left for someone else. */
  private after: string | undefined;
  private readonly now: () => number;

  constructor(
    private readonly client: WorkerClient,
    private readonly outputDir: string,
    private readonly log: Logger,
    /** Checkpoint directories that jobs read or write (running ones, and those run since the sweep began): kept. */
    private readonly inUse: () => ReadonlySet<string>,
    options: { now?: () => number } = {},
  ) {
    this.now = options.now ?? Date.now;
  }

  /**
   * Goes through every release listed after the last one looked at, deleting and acknowledging what is this
   * worker's. One whose directory a running job still uses, or that could not be deleted, is looked at again
   * in the next sweep. So is every release after one recorded less than RELEASE_SETTLE_MS ago: release ids are
   * taken when a deleting transaction writes them, not when it commits, so a long one (a model delete) can
   * commit a lower id after a higher one was listed. Someone else's older releases are not listed to this
   * worker again until it restarts.
   */
  async sweep(signal?: AbortSignal): Promise<{ released: number; others: number; postponed: number }> {
    let released = 0;
    let others = 0;
    let postponed = 0;
    let cursor = this.after;
    // Where the next sweep starts: after the last release before the first one that must be looked at again.
    let resumeAfter = this.after;
    let settledSoFar = true;
    const settled = this.now() - RELEASE_SETTLE_MS;
    // Looked at first, so that the marker is written while a model's directory is there to vouch for the storage.
    const present = await this.storagePresent();
    for (;;) {
      const page = await this.client.listReleases({ after: cursor, limit: RELEASES_PER_CALL }, signal);
      const done: string[] = [];
      for (const release of page) {
        const recent = !(Date.parse(release.created_at) <= settled);
        const directory = checkpointDirectory(release.uri, this.outputDir);
        if (directory === undefined) {
          others++;
          settledSoFar &&= !recent;
          if (settledSoFar) resumeAfter = release.id;
          continue;
        }
        try {
          if (this.inUse().has(directory)) throw new Error('a running job uses it');
          const outcome = await this.remove(directory);
          if (outcome === 'already gone' && !present) {
            throw new Error(`${this.outputDir} holds no checkpoint directories and no ${STORAGE_MARKER} file: is its storage mounted?`);
          }
          this.log.info({ uri: release.uri, reason: release.reason, outcome }, 'released the storage of a deleted checkpoint');
          done.push(release.id);
          settledSoFar &&= !recent;
        } catch (error) {
          this.log.warn({ uri: release.uri, err: (error as Error).message }, 'the storage of a deleted checkpoint is kept for now');
          postponed++;
          settledSoFar = false;
        }
        if (settledSoFar) resumeAfter = release.id;
      }
      if (done.length > 0) released += await this.client.acknowledgeReleases(done, signal);
      if (page.length > 0) cursor = page[page.length - 1].id;
      if (page.length < RELEASES_PER_CALL) break;
    }
    this.after = resumeAfter;
    return { released, others, postponed };
  }

  /**
   * Whether the output directory is the storage that trainers write checkpoints to rather than, say, the empty
   * mount point of a network volume that is not mounted, where every directory would look already gone. It is
   * once a sweep has seen a model's directory in it: the marker file written then stays when the last one goes.
   */
  private async storagePresent(): Promise<boolean> {
    const marker = path.join(this.outputDir, STORAGE_MARKER);
    if (await fs.access(marker).then(() => true, () => false)) return true;
    const entries = await fs.readdir(this.outputDir).catch(() => [] as string[]);
    if (!entries.some((name) => MODEL_ID.test(name))) return false;
    await fs.writeFile(marker, MARKER_TEXT).catch((error: Error) => this.log.warn({ err: error.message, marker }, 'could not write the storage marker'));
    return true;
  }

  /** Deletes one checkpoint directory, then its model's directory if that is left empty. */
  private async remove(directory: string): Promise<'deleted' | 'already gone'> {
    const root = await fs.realpath(this.outputDir);
    let modelDir: string;
    try {
      modelDir = await fs.realpath(path.dirname(directory));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'already gone';
      throw error;
    }
    // The model's directory is a link out of the output directory: not ours to delete in.
    if (path.dirname(modelDir) !== root) throw new Error(`${path.dirname(directory)} leads out of the output directory ${this.outputDir}`);
    const target = path.join(modelDir, path.basename(directory));
    try {
      await fs.lstat(target);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'already gone';
      throw error;
    }
    // A link is removed, not followed.
    await fs.rm(target, { recursive: true, force: true });
    const modelInUse = [...this.inUse()].some((used) => path.dirname(used) === path.dirname(directory));
    if (!modelInUse) await fs.rmdir(modelDir).catch(() => undefined);
    return 'deleted';
  }
}

/**
 * How long after a release was recorded the worker may stop listing the releases before it: longer than a
 * deleting transaction takes (and the clock difference between worker and server), so that every release
 * with a lower id has committed by then.
 */
export const RELEASE_SETTLE_MS = 15 * 60_000;

/**
 * The file in an output directory that has held checkpoint directories. Without it (and without any model's
 * directory), a release whose directory is missing is not acknowledged: the storage may just not be mounted.
 */
export const STORAGE_MARKER = '.trainyard-checkpoints';
const MARKER_TEXT =
  'trainyard-worker: this directory holds checkpoint directories (<model id>/step-<N>).\n' +
  'While this file is missing and no model directory is here, the worker does not take a missing checkpoint directory as deleted.\n';

const MODEL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const STEP = /^step-(0|[1-9][0-9]*)$/;

/**
 * The checkpoint directory a URI names when it is one of this layout under `outputDir` (`<model id>/step-<N>`,
 * as src/worker/job-files.ts makes them), as an absolute path; undefined for anything else.
 */
export function checkpointDirectory(uri: string, outputDir: string): string | undefined {
  const file = localAdapterPath(uri);
  if (file === undefined) return undefined;
  const parts = path.relative(path.resolve(outputDir), path.resolve(file)).split(path.sep);
  if (parts.length !== 2 || !MODEL_ID.test(parts[0]) || !STEP.test(parts[1])) return undefined;
  return path.join(path.resolve(outputDir), parts[0], parts[1]);
}


