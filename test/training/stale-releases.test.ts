import { Migrator, sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as staleCheckpointReleases from '../../migrations/0027_stale_checkpoint_releases.js';
import { migrations } from '../../migrations/index.js';
import type { App } from '../../src/app.js';
import { migrateToLatest } from '../../src/db/index.js';
import { jsonb } from '../../src/training/repository/db.js';
import { listReleases } from '../../src/training/repository/retention.js';
import { createTestApp, uniqueName } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
import { call, groupGenerationA, modelWithWorker, type ModelWithWorker } from './fixtures.js';

/**
 * Storage releases that releases before 0027 left behind: they recorded a release when a checkpoint was
 * deleted and never dropped it when a job trained the same step again into the same directory (the worker
 * writes `<output-dir>/<model id>/step-<N>`), so a live checkpoint's storage was listed for deletion.
 */

let app: App;
beforeAll(async () => {
  app = await createTestApp();
});
afterAll(async () => {
  await app.close();
});

/** Where trainyard-worker with `--output-dir /adapters` writes a step of a model. */
const stepDir = (t: ModelWithWorker, step: number) => `/adapters/${t.model.id}/step-${step}`;

/** One job per URI, claimed and completed there: the model's checkpoints at steps 1, 2, ... */
async function trainAt(t: ModelWithWorker, uris: string[]): Promise<void> {
  for (const uri of uris) {
    const job = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    const claimed = await t.worker.claim(5);
    if (!claimed) throw new Error('no job to claim');
    const done = await t.worker.complete(claimed, {}, uri);
    expect(done.status, done.text).toBe(200);
  }
}

/** Releases as a release before 0026 wrote them: no model, no step. Returns their ids. */
async function oldReleases(t: ModelWithWorker, uris: string[], entityId?: string): Promise<string[]> {
  const entity = entityId ?? (await app.db.selectFrom('models').select('entity_id').where('id', '=', t.model.id).executeTakeFirstOrThrow()).entity_id;
  const rows = await app.db
    .insertInto('checkpoint_releases')
    .values(uris.map((uri) => ({ entity_id: entity, uri, reason: 'deleted' as const })))
    .returning('id')
    .execute();
  return rows.map((row) => String(row.id));
}

async function listedUris(t: ModelWithWorker): Promise<string[]> {
  const page = await t.worker.call('GET', '/v1/workers/checkpoint-releases?limit=1000');
  expect(page.status, page.text).toBe(200);
  return page.body.data.map((r: { uri: string }) => r.uri).filter((uri: string) => uri.includes(t.model.id));
}

async function releaseRows(ids: string[]): Promise<{ id: string; uri: string; model_id: string | null; step: number | null }[]> {
  const rows = await app.db
    .selectFrom('checkpoint_releases')
    .select(['id', 'uri', 'model_id', 'step'])
    .where(sql<boolean>`id = any(${ids}::bigint[])`)
    .orderBy('id')
    .execute();
  return rows.map((row) => ({ ...row, id: String(row.id) }));
}

describe('a storage release left behind by an older trainyard while a live checkpoint names its storage', () => {
  it('is never listed to a worker, whichever of `dir` and `dir/` the release and the checkpoint name', async () => {
    const t = await modelWithWorker(app);
    await trainAt(t, [stepDir(t, 1), `${stepDir(t, 2)}/`]);
    await oldReleases(t, [stepDir(t, 1), `${stepDir(t, 1)}/`, stepDir(t, 2), `${stepDir(t, 2)}/`, stepDir(t, 7)]);

    expect(await listedUris(t)).toEqual([stepDir(t, 7)]);
  });

  it('is deleted when a database of a release before 0027 is upgraded, and the other releases are kept and listed', async () => {
    const database = await freshDatabase();
    try {
      const { db } = database;
      const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateTo('0026_checkpoint_release_steps');
      expect(error).toBeUndefined();
      const entity = crypto.randomUUID();
      const model = crypto.randomUUID();
      const dir = (step: number) => `/adapters/${model}/step-${step}`;
      await db.insertInto('entities').values({ id: entity, name: uniqueName('team'), kind: 'team' }).execute();
      await db.insertInto('models').values({ id: model, entity_id: entity, project: 'p', name: 'agent', base_model: 'Qwen/Qwen3-14B' }).execute();
      await db
        .insertInto('checkpoints')
        .values([
          { id: crypto.randomUUID(), model_id: model, step: 1, uri: dir(1), metrics: jsonb({}) },
          { id: crypto.randomUUID(), model_id: model, step: 2, uri: `${dir(2)}/`, metrics: jsonb({}) },
        ])
        .execute();
      const released = (uri: string) => ({ entity_id: entity, uri, reason: 'deleted' as const });
      await db.insertInto('checkpoint_releases').values([dir(1), `${dir(1)}/`, dir(2), `${dir(2)}/`, dir(7)].map(released)).execute();

      expect((await migrateToLatest(db)).map((r) => [r.migrationName, r.status])).toContainEqual(['0027_stale_checkpoint_releases', 'Success']);

      const rows = await db.selectFrom('checkpoint_releases').select(['uri', 'model_id', 'step']).where('entity_id', '=', entity).execute();
      expect(rows).toEqual([{ uri: dir(7), model_id: model, step: 7 }]);
      const listed = await listReleases(db, { reach: 'all', limit: 1000 });
      expect(listed.map((r) => r.uri).filter((uri) => uri.includes(model))).toEqual([dir(7)]);
    } finally {
      await database.close();
    }
  });
});

describe('migration 0027 on releases recorded before they kept their model and step', () => {
  it('gives those in the worker layout (a path or a file:// URL, `dir` or `dir/`) the model and step they name, when the model is the release\'s entity\'s', async () => {
    const t = await modelWithWorker(app);
    const stranger = await modelWithWorker(app);
    const ids = await oldReleases(t, [
      stepDir(t, 3),
      `file://${stepDir(t, 4)}/`,
      `${stepDir(stranger, 5)}`,
      `s3://checkpoints/${t.model.name}/6`,
      `/adapters/${t.model.id}/step-06`,
      `/adapters/${t.model.id}/step-99999999999`,
    ]);

    await staleCheckpointReleases.up(app.db as unknown as Kysely<unknown>);

    expect((await releaseRows(ids)).map((row) => [row.uri, row.model_id, row.step])).toEqual([
      [stepDir(t, 3), t.model.id, 3],
      [`file://${stepDir(t, 4)}/`, t.model.id, 4],
      [stepDir(stranger, 5), null, null],
      [`s3://checkpoints/${t.model.name}/6`, null, null],
      [`/adapters/${t.model.id}/step-06`, null, null],
      [`/adapters/${t.model.id}/step-99999999999`, null, null],
    ]);
  });

  it('so that such a release is not listed while a job of its model trains that step again', async () => {
    const t = await modelWithWorker(app);
    await trainAt(t, [stepDir(t, 1)]);
    await oldReleases(t, [stepDir(t, 2)]);
    await staleCheckpointReleases.up(app.db as unknown as Kysely<unknown>);
    expect(await listedUris(t)).toEqual([stepDir(t, 2)]);

    await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    const again = (await t.worker.claim(5))!;
    expect(again.job.target_step).toBe(2);
    expect(await listedUris(t)).toEqual([]);
    expect((await t.worker.complete(again, {}, stepDir(t, 2))).status).toBe(200);
    expect(await listedUris(t)).toEqual([]);
  });
});
