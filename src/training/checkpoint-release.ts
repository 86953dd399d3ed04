import fs from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { FastifyBaseLogger } from 'fastify';
import type { DomainEvents } from '../events.js';
import { localAdapterPath } from './protocol.js';
import { urisInUse, type DeletedCheckpoint, type StoredModel, type TrainingDb } from './repository.js';

/**
 * What follows a committed checkpoint delete, whoever deleted (a user, the retention policy, the TTL, a
 * model delete): the inference router hears of it and unloads the adapters from its engines, and the
 * files of imported checkpoints, which trainyard stored under its adapters directory, are removed unless
 * a remaining checkpoint names them (a trainer that took no step may register its base checkpoint's
 * directory as the new step). Trained checkpoints' storage belongs to the workers' side and was recorded in
 * `checkpoint_releases` in the deleting transaction.
 */
export class CheckpointReleaser {
  constructor(
    private readonly db: TrainingDb,
    private readonly events: DomainEvents,
    /** Where imported adapters live; only paths inside it are ever removed. */
    readonly adaptersDir: string,
    private readonly log: FastifyBaseLogger,
  ) {}

  async released(model: StoredModel, deleted: readonly DeletedCheckpoint[]): Promise<void> {
    if (deleted.length === 0) return;
    this.events.emit('checkpoints-deleted', {
      entity: model.entity,
      project: model.project,
      model: model.name,
      steps: deleted.map((c) => c.step),
      uris: deleted.map((c) => c.uri),
      ids: deleted.map((c) => c.id),
    });
    const stillNamed = await this.stillNamed(deleted.filter((c) => c.source === 'imported').map((c) => path.resolve(c.uri)));
    for (const checkpoint of deleted) {
      if (checkpoint.source !== 'imported') continue;
      const dir = path.resolve(checkpoint.uri);
      if (stillNamed.has(dir)) continue;
      if (path.dirname(dir) !== this.adaptersDir) {
        this.log.warn({ uri: checkpoint.uri }, 'an imported checkpoint outside the adapters directory was not removed');
        continue;
      }
      await fs.rm(dir, { recursive: true, force: true }).catch((error: unknown) => {
        this.log.warn({ err: error, uri: checkpoint.uri }, 'could not remove an imported checkpoint\'s files');
      });
    }
  }

  /** Of these directories, the ones a checkpoint still names, as a path or a file:// URI. */
  private async stillNamed(dirs: readonly string[]): Promise<Set<string>> {
    const uris = [...new Set(dirs.flatMap((dir) => [dir, pathToFileURL(dir).href]))];
    const named = await urisInUse(this.db, { uris });
    return new Set(named.map((uri) => path.resolve(localAdapterPath(uri) ?? uri)));
  }
}
