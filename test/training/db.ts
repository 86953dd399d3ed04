import type { Kysely } from 'kysely';
import * as foundation from '../../migrations/0001_foundation.js';
import * as training from '../../migrations/0002_training.js';
import * as checkpointLifecycle from '../../migrations/0009_checkpoint_lifecycle.js';
import * as workerResidentTrainers from '../../migrations/0010_worker_resident_trainers.js';
import * as deletedCheckpoints from '../../migrations/0016_deleted_checkpoints.js';
import * as workerKeys from '../../migrations/0017_worker_keys.js';
import * as claimIds from '../../migrations/0018_claim_ids.js';
import * as checkpointReleaseSteps from '../../migrations/0026_checkpoint_release_steps.js';
import { createPglite, pgliteHandle, type DatabaseHandle } from '../../src/db/index.js';
import type { TrainingDb } from '../../src/training/repository.js';

/**
 * An in-memory PGlite with only the migrations the training tables need (foundation, training, checkpoint
 * lifecycle, workers' resident trainers, deleted checkpoints, workers keyed by api key, claim ids, the
 * steps of storage releases), so that repository tests do not pay for the tracing tables.
 */
export async function openTrainingDb(): Promise<{ handle: DatabaseHandle; db: TrainingDb }> {
  const handle = pgliteHandle(await createPglite());
  const raw = handle.db as unknown as Kysely<unknown>;
  await foundation.up(raw);
  await training.up(raw);
  await checkpointLifecycle.up(raw);
  await workerResidentTrainers.up(raw);
  await deletedCheckpoints.up(raw);
  await workerKeys.up(raw);
  await claimIds.up(raw);
  await checkpointReleaseSteps.up(raw);
  return { handle, db: handle.db as unknown as TrainingDb };
}

/** A fresh entity, so that tests sharing one database never see each other's rows. */
export async function createEntity(db: TrainingDb, name = `team-${crypto.randomUUID().slice(0, 8)}`): Promise<string> {
  const id = crypto.randomUUID();
  await db.insertInto('entities').values({ id, name, kind: 'team' }).execute();
  return id;
}
