import { sql } from 'kysely';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { CheckpointReleaser } from '../../src/training/checkpoint-release.js';
import { LifecycleService } from '../../src/training/lifecycle-service.js';
import * as repo from '../../src/training/repository.js';
import type { TrainingService } from '../../src/training/service.js';
import { createTestApp, createWorkerKey } from '../helpers/app.js';
import { blockedOrSettled, onPostgresServer } from '../helpers/database.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused, jsonRequest as json } from '../helpers/tenants.js';
import { call, checkpointSteps, groupGenerationA, modelWithWorker, ScriptedWorker, userWithModel, type ModelWithWorker, type Reply } from './fixtures.js';

/**
 * Retention per model: the latest N, the best K by a metric, pinned checkpoints; a TTL for the rest;
 * applied when a checkpoint lands, on request and by the expiry sweep.
 */

let app: App;
let deletedEvents: { model: string; steps: number[] }[];

beforeAll(async () => {
  // The expiry sweep does not run in this app (its interval is a day), so that only requests delete here;
  // the sweep has its own app below.
  app = await createTestApp({ CHECKPOINT_EXPIRY_INTERVAL_MS: '86400000' });
  deletedEvents = [];
  app.events.on('checkpoints-deleted', (event) => deletedEvents.push({ model: event.model, steps: event.steps }));
});
afterAll(async () => {
  await app.close();
});

type Trained = ModelWithWorker;

/** One training step per value: a job, claimed and completed with that checkpoint metric. */
async function train(t: Trained, metrics: Record<string, number>[]): Promise<void> {
  for (const checkpointMetrics of metrics) {
    const job = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    const claimed = await t.worker.claim(5);
    if (!claimed) throw new Error('no job to claim');
    const done = await t.worker.complete(claimed, checkpointMetrics);
    expect(done.status, done.text).toBe(200);
  }
}

const steps = (t: Trained) => checkpointSteps(app, t);

async function lifecycle(t: Trained): Promise<Record<number, { pinned: boolean; latest: boolean; best: boolean; expires_at: string | null }>> {
  const page = await call(app, t.user.headers, 'GET', `${t.base}/checkpoints/lifecycle?limit=100`);
  expect(page.status, page.text).toBe(200);
  return Object.fromEntries(page.body.data.map((c: any) => [c.step, { pinned: c.pinned, latest: c.latest, best: c.best, expires_at: c.expires_at }]));
}

async function setPolicy(t: Trained, policy: Record<string, unknown>): Promise<void> {
  const reply = await call(app, t.user.headers, 'PUT', `${t.base}/retention`, policy);
  expect(reply.status, reply.text).toBe(200);
}

const rewards = (...values: number[]) => values.map((value) => ({ 'val/reward': value }));

describe('keeping the latest and the best', () => {
  it('keeps the latest N, the best K by val/reward and every pinned checkpoint as checkpoints land', async () => {
    const t = await modelWithWorker(app);
    await setPolicy(t, { keep_latest: 2, keep_best: 1, best_metric: 'val/reward', best_mode: 'max' });
    await train(t, rewards(0.1));
    expect((await call(app, t.user.headers, 'POST', `${t.base}/checkpoints/1/pin`)).status).toBe(200);
    await train(t, rewards(0.9, 0.3, 0.2, 0.5, 0.4));

    expect(await steps(t)).toEqual([1, 2, 5, 6]);
    expect(await lifecycle(t)).toEqual({
      1: { pinned: true, latest: false, best: false, expires_at: null },
      2: { pinned: false, latest: false, best: true, expires_at: null },
      5: { pinned: false, latest: true, best: false, expires_at: null },
      6: { pinned: false, latest: true, best: false, expires_at: null },
    });
    // The router heard of each deletion (it unloads the adapters), and the workers' side may release their storage.
    expect(deletedEvents.filter((e) => e.model === t.model.name).map((e) => e.steps)).toEqual([[3], [4]]);
    const releases = await app.db
      .selectFrom('checkpoint_releases')
      .select(['uri', 'reason'])
      .where('uri', 'like', `s3://checkpoints/${t.model.name}/%`)
      .orderBy('id')
      .execute();
    expect(releases).toEqual([
      { uri: `s3://checkpoints/${t.model.name}/3`, reason: 'retention' },
      { uri: `s3://checkpoints/${t.model.name}/4`, reason: 'retention' },
    ]);
  });

  it('ranks by a metric where lower is better with best_mode min, applied on request', async () => {
    const t = await modelWithWorker(app);
    await train(t, [{ 'loss/val': 0.5 }, { 'loss/val': 0.2 }, { 'loss/val': 0.3 }, { 'loss/val': 0.1 }, { 'loss/val': 0.9 }]);
    await setPolicy(t, { keep_latest: 1, keep_best: 2, best_metric: 'loss/val', best_mode: 'min' });
    expect(await steps(t)).toEqual([1, 2, 3, 4, 5]);

    const applied = await call(app, t.user.headers, 'POST', `${t.base}/retention/apply`);
    expect(applied.status, applied.text).toBe(200);
    expect(applied.body).toEqual({ deleted_steps: [1, 3], expired_steps: [] });
    expect(await steps(t)).toEqual([2, 4, 5]);
  });

  it('keeps everything with no policy, and reports the policy it stored', async () => {
    const t = await modelWithWorker(app);
    expect((await call(app, t.user.headers, 'GET', `${t.base}/retention`)).body).toEqual({
      keep_latest: null,
      keep_best: null,
      best_metric: null,
      best_mode: 'max',
      ttl_seconds: null,
    });
    await train(t, rewards(0.1, 0.2, 0.3));
    expect((await call(app, t.user.headers, 'POST', `${t.base}/retention/apply`)).body).toEqual({ deleted_steps: [], expired_steps: [] });
    expect(await steps(t)).toEqual([1, 2, 3]);

    await setPolicy(t, { keep_latest: 5, best_metric: 'val/reward' });
    expect((await call(app, t.user.headers, 'GET', `${t.base}/retention`)).body).toEqual({
      keep_latest: 5,
      keep_best: 1,
      best_metric: 'val/reward',
      best_mode: 'max',
      ttl_seconds: null,
    });
  });
});

describe('pins', () => {
  it('spares a pinned checkpoint from Delete Model Checkpoints, and deletes it once unpinned', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2));
    const pinned = await call(app, t.user.headers, 'POST', `${t.base}/checkpoints/1/pin`);
    expect(pinned.status, pinned.text).toBe(200);
    expect(pinned.body).toMatchObject({ step: 1, pinned: true, latest: false, best: false, source: 'trained', metrics: { 'val/reward': 0.1 } });

    const spared = await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1, 2, 7] });
    expect(spared.body).toEqual({ deleted_count: 1, not_found_steps: [7], pinned_steps: [1], in_use_steps: [] });
    expect(await steps(t)).toEqual([1]);

    expect((await call(app, t.user.headers, 'POST', `${t.base}/checkpoints/1/unpin`)).body).toMatchObject({ step: 1, pinned: false, latest: true });
    expect((await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1] })).body).toEqual({ deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [] });
    expect(await steps(t)).toEqual([]);
  });
});

describe('checkpoints a running job trains from', () => {
  it('spares a running job\'s base checkpoint from Delete Model Checkpoints, releasing nothing, and deletes it once the job ends', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2));
    const job = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    const claimed = (await t.worker.claim(5))!;
    expect(claimed.job.base_checkpoint?.step).toBe(2);

    const spared = await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1, 2, 9] });
    expect(spared).toMatchObject({ status: 200, body: { deleted_count: 1, not_found_steps: [9], pinned_steps: [], in_use_steps: [2] } });
    expect(await steps(t)).toEqual([2]);
    const released = () =>
      app.db.selectFrom('checkpoint_releases').select('uri').where('uri', 'like', `s3://checkpoints/${t.model.name}/%`).orderBy('id').execute();
    expect(await released()).toEqual([{ uri: `s3://checkpoints/${t.model.name}/1` }]);
    expect(deletedEvents.filter((e) => e.model === t.model.name).map((e) => e.steps)).toEqual([[1]]);

    expect((await t.worker.complete(claimed, { 'val/reward': 0.3 })).status).toBe(200);
    const after = await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [2] });
    expect(after.body).toEqual({ deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [] });
    expect(await steps(t)).toEqual([3]);
    expect(await released()).toEqual([{ uri: `s3://checkpoints/${t.model.name}/1` }, { uri: `s3://checkpoints/${t.model.name}/2` }]);
  });
});

/**
 * On a PostgreSQL server (PGlite has one connection, so nothing runs concurrently there): applying a
 * policy holds the claim lock, as Delete Model Checkpoints does, so that no job starts from a checkpoint
 * it is deleting and it sees every job that has started.
 */
describe.skipIf(!onPostgresServer)('retention while a job is being claimed (PostgreSQL)', () => {
  it('waits for a claim in flight, then keeps the checkpoint the claimed job trains from', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2, 0.3));
    await setPolicy(t, { keep_latest: 1 });
    const job = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    let applying: Promise<Reply> | undefined;
    await app.db.transaction().execute(async (trx) => {
      const claim = await repo.claimJob(trx, { reach: [t.user.entity], workerId: t.worker.workerId, baseModels: t.worker.baseModels, leaseSeconds: 600 });
      expect(claim?.base_checkpoint?.step).toBe(3);
      applying = call(app, t.user.headers, 'POST', `${t.base}/retention/apply`);
      expect(await blockedOrSettled(app.db, applying)).toBe('blocked');
    });
    expect(await applying!).toEqual({ status: 200, body: { deleted_steps: [1, 2], expired_steps: [] }, text: expect.any(String) });
    expect(await steps(t)).toEqual([3]);
  });
});

describe('paging while checkpoints are deleted', () => {
  async function page(t: Trained, query: string): Promise<Reply> {
    return call(app, t.user.headers, 'GET', `${t.base}/checkpoints?${query}`);
  }
  const item = (id: string, step: number) => ({ id, step, metrics: { 'val/reward': step / 10 } });

  it('pages on from the cursor of a checkpoint deleted between two pages, in both orders and on the lifecycle list', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2, 0.3, 0.4, 0.5));
    const ids = new Map<number, string>((await page(t, 'limit=100')).body.data.map((c: { id: string; step: number }) => [c.step, c.id]));
    const id = (step: number) => ids.get(step)!;
    expect((await page(t, 'limit=2')).body.last_id).toBe(id(2));
    expect((await page(t, 'limit=2&order=desc')).body.last_id).toBe(id(4));

    // A user deletes the two cursors' checkpoints before the clients ask for their next pages.
    expect((await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [2, 4] })).status).toBe(200);
    expect(await page(t, `limit=2&after=${id(2)}`)).toEqual({
      status: 200,
      body: { object: 'list', data: [item(id(3), 3), item(id(5), 5)], first_id: id(3), last_id: id(5), has_more: false },
      text: expect.any(String),
    });
    expect(await page(t, `limit=2&order=desc&after=${id(4)}`)).toEqual({
      status: 200,
      body: { object: 'list', data: [item(id(3), 3), item(id(1), 1)], first_id: id(3), last_id: id(1), has_more: false },
      text: expect.any(String),
    });

    // Retention deletes steps 1 and 3 in its turn.
    await setPolicy(t, { keep_latest: 1 });
    expect((await call(app, t.user.headers, 'POST', `${t.base}/retention/apply`)).body).toEqual({ deleted_steps: [1, 3], expired_steps: [] });
    expect(await page(t, `limit=2&after=${id(3)}`)).toEqual({
      status: 200,
      body: { object: 'list', data: [item(id(5), 5)], first_id: id(5), last_id: id(5), has_more: false },
      text: expect.any(String),
    });
    const lifecyclePage = await call(app, t.user.headers, 'GET', `${t.base}/checkpoints/lifecycle?after=${id(1)}`);
    expect(lifecyclePage.status, lifecyclePage.text).toBe(200);
    expect(lifecyclePage.body).toMatchObject({ object: 'list', data: [{ id: id(5), step: 5, latest: true }], first_id: id(5), last_id: id(5), has_more: false });
  });

  it('still refuses an id that was never a checkpoint of the model, and forgets deleted ones after a day or with their model', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2));
    const other = await modelWithWorker(app);
    await train(other, rewards(0.1));
    const [first] = (await page(t, 'limit=1')).body.data;
    const [foreign] = (await page(other, 'limit=1')).body.data;
    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1] });
    await call(app, other.user.headers, 'DELETE', `${other.base}/checkpoints`, { steps: [1] });
    const refused = (after: string) => ({
      status: 422,
      body: { detail: [{ type: 'value_error', loc: ['query', 'after'], msg: `Value error, after is not the id of a checkpoint of model ${t.model.id}`, input: after }] },
      text: expect.any(String),
    });
    // Another model's deleted checkpoint, and an id that names nothing.
    expect(await page(t, `after=${foreign.id}`)).toEqual(refused(foreign.id));
    const unknown = crypto.randomUUID();
    expect(await page(t, `after=${unknown}`)).toEqual(refused(unknown));
    expect((await page(t, `after=${first.id}`)).body.data.map((c: { step: number }) => c.step)).toEqual([2]);

    // A day after the delete, the expiry sweep forgets the cursor.
    await app.db.updateTable('deleted_checkpoints').set({ deleted_at: sql<Date>`deleted_at - interval '25 hours'` }).where('id', '=', first.id).execute();
    const sweep = new LifecycleService({
      db: app.db,
      training: {} as TrainingService,
      releaser: new CheckpointReleaser(app.db, app.events, path.resolve(app.config.adaptersDir), app.log),
    });
    await sweep.expireCheckpoints();
    expect(await page(t, `after=${first.id}`)).toEqual(refused(first.id));

    // Deleting a model forgets its deleted checkpoints.
    const remembered = () => app.db.selectFrom('deleted_checkpoints').select('id').where('model_id', '=', other.model.id).execute();
    expect(await remembered()).toEqual([{ id: foreign.id }]);
    expect((await call(app, other.user.headers, 'DELETE', other.base)).status).toBe(200);
    expect(await remembered()).toEqual([]);
  });
});

describe('time to live', () => {
  /** Registers the checkpoints two hours earlier than they were, as if time had passed. */
  async function ageCheckpoints(t: Trained): Promise<void> {
    await app.db
      .updateTable('checkpoints')
      .set({ created_at: sql<Date>`created_at - interval '2 hours'` })
      .where('model_id', '=', t.model.id)
      .execute();
  }

  it('expires unpinned checkpoints that are neither latest nor best, and shows when each will', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.9, 0.1, 0.2, 0.3));
    await setPolicy(t, { best_metric: 'val/reward', ttl_seconds: 3600 });
    expect((await call(app, t.user.headers, 'POST', `${t.base}/checkpoints/3/pin`)).status).toBe(200);
    const before = await lifecycle(t);
    expect([before[1].expires_at, before[3].expires_at, before[4].expires_at]).toEqual([null, null, null]);
    const created = (await call(app, t.user.headers, 'GET', `${t.base}/checkpoints/lifecycle?limit=100`)).body.data[1].created_at;
    expect(Date.parse(before[2].expires_at as string) - Date.parse(created)).toBe(3600 * 1000);

    // Not yet expired: applying deletes nothing (the count rule is off).
    expect((await call(app, t.user.headers, 'POST', `${t.base}/retention/apply`)).body).toEqual({ deleted_steps: [], expired_steps: [] });
    await ageCheckpoints(t);
    expect((await call(app, t.user.headers, 'POST', `${t.base}/retention/apply`)).body).toEqual({ deleted_steps: [], expired_steps: [2] });
    expect(await steps(t)).toEqual([1, 3, 4]);
  });

  it('is enforced by the expiry sweep without any request', async () => {
    const sweeping = await createTestApp({ CHECKPOINT_EXPIRY_INTERVAL_MS: '100' });
    const main = app;
    app = sweeping;
    try {
      await expiresBySweep();
    } finally {
      app = main;
      await sweeping.close();
    }
  });

  it('sweeps every model with a TTL, page after page, not only the first page of models', async () => {
    const models = [await modelWithWorker(app), await modelWithWorker(app), await modelWithWorker(app)];
    for (const t of models) {
      await train(t, rewards(0.1, 0.2));
      await setPolicy(t, { ttl_seconds: 60 });
      await ageCheckpoints(t);
    }
    // Two models a page, so that at least one of these three is past the first page (ordered by id).
    // The sweep reaches no principal's scope: it needs no training service.
    const sweep = new LifecycleService({
      db: app.db,
      training: {} as TrainingService,
      releaser: new CheckpointReleaser(app.db, app.events, path.resolve(app.config.adaptersDir), app.log),
      ttlSweepPageSize: 2,
    });
    expect(await sweep.expireCheckpoints()).toBeGreaterThanOrEqual(3);
    for (const t of models) expect(await steps(t)).toEqual([2]);
    expect(deletedEvents.filter((e) => models.some((t) => t.model.name === e.model)).map((e) => e.steps)).toEqual([[1], [1], [1]]);
  });

  async function expiresBySweep(): Promise<void> {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2, 0.3));
    await setPolicy(t, { ttl_seconds: 60 });
    await ageCheckpoints(t);
    for (let i = 0; i < 200 && (await steps(t)).length > 1; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await steps(t)).toEqual([3]);
    const releases = await app.db.selectFrom('checkpoint_releases').select('reason').where('uri', 'like', `s3://checkpoints/${t.model.name}/%`).execute();
    expect(releases.map((r) => r.reason)).toEqual(['expired', 'expired']);
  }
});

/** The storage releases a worker of `t` lists (one page of up to 1,000) whose URI `keep` takes. */
async function releasesOf(t: Trained, keep: (uri: string) => boolean): Promise<{ id: string; uri: string; reason: string }[]> {
  const page = await t.worker.call('GET', '/v1/workers/checkpoint-releases?limit=1000');
  expect(page.status, page.text).toBe(200);
  return page.body.data.filter((r: { uri: string }) => keep(r.uri));
}

describe('storage handed to the workers\' side', () => {
  it('lists the URIs of deleted trained checkpoints to the owner\'s worker key only, until they are acknowledged', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2, 0.3));
    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1, 2] });
    const mine = (reply: { body: { data: { uri: string }[] } }) => reply.body.data.filter((r) => r.uri.startsWith(`s3://checkpoints/${t.model.name}/`));

    const listed = await t.worker.call('GET', '/v1/workers/checkpoint-releases?limit=1000');
    expect(listed.status, listed.text).toBe(200);
    expect(mine(listed).map((r: any) => [r.uri, r.reason])).toEqual([
      [`s3://checkpoints/${t.model.name}/1`, 'deleted'],
      [`s3://checkpoints/${t.model.name}/2`, 'deleted'],
    ]);
    const ids = mine(listed).map((r: any) => r.id);
    // `after` pages on from a release id.
    expect(mine(await t.worker.call('GET', `/v1/workers/checkpoint-releases?limit=1000&after=${ids[0]}`)).map((r: any) => r.id)).toEqual([ids[1]]);
    expect(mine(await t.worker.call('GET', `/v1/workers/checkpoint-releases?limit=1000&after=${ids[1]}`))).toEqual([]);

    const stranger = await modelWithWorker(app);
    expect(mine(await stranger.worker.call('GET', '/v1/workers/checkpoint-releases?limit=1000'))).toEqual([]);
    expect((await stranger.worker.call('POST', '/v1/workers/checkpoint-releases/ack', { ids })).body).toEqual({ acknowledged: 0 });
    expect(mine(await t.worker.call('GET', '/v1/workers/checkpoint-releases?limit=1000'))).toHaveLength(2);

    expect((await t.worker.call('POST', '/v1/workers/checkpoint-releases/ack', { ids })).body).toEqual({ acknowledged: 2 });
    expect(mine(await t.worker.call('GET', '/v1/workers/checkpoint-releases?limit=1000'))).toEqual([]);
    // A user key is refused, as on every worker route.
    expect((await call(app, t.user.headers, 'GET', '/v1/workers/checkpoint-releases')).status).toBe(403);
  });

  it('lists no storage that a remaining checkpoint still names, and lists it once when none does', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1));
    const uri = `s3://checkpoints/${t.model.name}/1`;
    // A trainer that took no step registers its base checkpoint's storage as step 2.
    const job = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    const claimed = await t.worker.claim(5);
    expect(claimed?.job.base_checkpoint?.uri).toBe(uri);
    expect((await t.worker.complete(claimed!, {}, uri)).status).toBe(200);
    const mine = () => releasesOf(t, (listed) => listed === uri);

    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1] });
    expect(await mine()).toEqual([]);
    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [2] });
    expect((await mine()).map((r) => r.reason)).toEqual(['deleted']);
  });

  it('takes `dir/` for the same storage as `dir`', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1));
    const uri = `s3://checkpoints/${t.model.name}/1`;
    const job = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    const claimed = await t.worker.claim(5);
    expect((await t.worker.complete(claimed!, {}, `${uri}/`)).status).toBe(200);
    const mine = async () => (await releasesOf(t, (listed) => listed.startsWith(uri))).map((r) => r.uri);

    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [1] });
    expect(await mine()).toEqual([]);
    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [2] });
    expect(await mine()).toEqual([`${uri}/`]);
  });

  it('does not list the storage of a deleted step while a job trains that step again, and drops it when the job lands there', async () => {
    const t = await modelWithWorker(app);
    await train(t, rewards(0.1, 0.2));
    const uri = `s3://checkpoints/${t.model.name}/2`;
    const listed = async () => (await releasesOf(t, (named) => named === uri)).map((r) => r.uri);
    await call(app, t.user.headers, 'DELETE', `${t.base}/checkpoints`, { steps: [2] });
    expect(await listed()).toEqual([uri]);

    // The next job trains step 2 again, into the same storage: not listed while it runs.
    await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    const again = (await t.worker.claim(5))!;
    expect(again.job.target_step).toBe(2);
    expect(await listed()).toEqual([]);
    // It fails: the old storage is listed again.
    expect((await t.worker.fail(again, 'out of memory', false)).status).toBe(200);
    expect(await listed()).toEqual([uri]);

    // Another one lands there: the release is dropped, as the storage is a live checkpoint's.
    await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    const third = (await t.worker.claim(5))!;
    expect(third.job.target_step).toBe(2);
    expect(await listed()).toEqual([]);
    expect((await t.worker.complete(third, {})).status).toBe(200);
    expect(await listed()).toEqual([]);
  });

  it('refuses an empty or malformed acknowledgement, and a malformed page cursor', async () => {
    const t = await modelWithWorker(app);
    const cursor = await t.worker.call('GET', '/v1/workers/checkpoint-releases?after=0');
    expect(cursor).toMatchObject({
      status: 422,
      body: { detail: [{ type: 'string_pattern_mismatch', loc: ['query', 'after'], msg: "String should match pattern '^[1-9][0-9]{0,17}$'", input: '0', ctx: { pattern: '^[1-9][0-9]{0,17}$' } }] },
    });
    const empty = await t.worker.call('POST', '/v1/workers/checkpoint-releases/ack', { ids: [] });
    expect(empty).toMatchObject({ status: 422, body: { detail: [{ type: 'too_short', loc: ['body', 'ids'] }] } });
    const malformed = await t.worker.call('POST', '/v1/workers/checkpoint-releases/ack', { ids: ['1; drop table'] });
    expect(malformed).toMatchObject({ status: 422, body: { detail: [{ type: 'string_pattern_mismatch', loc: ['body', 'ids', 0], input: '1; drop table' }] } });
  });
});

describe('bad input', () => {
  let t: Trained;
  beforeAll(async () => {
    t = await modelWithWorker(app);
    await train(t, rewards(0.5));
  });

  async function refused(method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, body: unknown, status: number, expected: unknown): Promise<void> {
    const before = await databaseFingerprint(app);
    const reply = await app.inject(json(method, url, t.user, body));
    expect(reply.statusCode, reply.body).toBe(status);
    expect(reply.json()).toEqual(expected);
    expect(await databaseFingerprint(app)).toEqual(before);
  }

  it('refuses retention settings out of range, each naming the field, and stores nothing', async () => {
    const url = `${t.base}/retention`;
    await refused('PUT', url, { keep_latest: 0 }, 422, {
      detail: [{ type: 'greater_than_equal', loc: ['body', 'keep_latest'], msg: 'Input should be greater than or equal to 1', input: 0, ctx: { ge: 1 } }],
    });
    await refused('PUT', url, { keep_latest: 3, keep_best: 1001, best_metric: 'val/reward' }, 422, {
      detail: [{ type: 'less_than_equal', loc: ['body', 'keep_best'], msg: 'Input should be less than or equal to 1000', input: 1001, ctx: { le: 1000 } }],
    });
    await refused('PUT', url, { ttl_seconds: 59 }, 422, {
      detail: [{ type: 'greater_than_equal', loc: ['body', 'ttl_seconds'], msg: 'Input should be greater than or equal to 60', input: 59, ctx: { ge: 60 } }],
    });
    await refused('PUT', url, { best_mode: 'highest', best_metric: 'val/reward' }, 422, {
      detail: [{ type: 'literal_error', loc: ['body', 'best_mode'], msg: "Input should be 'max' or 'min'", input: 'highest', ctx: { expected: "'max' or 'min'" } }],
    });
    await refused('PUT', url, { keep_lastest: 3 }, 422, {
      detail: [{ type: 'extra_forbidden', loc: ['body', 'keep_lastest'], msg: 'Extra inputs are not permitted', input: 3 }],
    });
    await refused('PUT', url, { keep_latest: 3, keep_best: 2 }, 422, {
      detail: [
        { type: 'value_error', loc: ['body', 'best_metric'], msg: 'Value error, best_metric is required when keep_best is set', ctx: { error: 'best_metric is required when keep_best is set' } },
      ],
    });
  });

  it('refuses a metric the model never logged, listing the ones it knows', async () => {
    await refused('PUT', `${t.base}/retention`, { keep_latest: 3, best_metric: 'val/acuracy' }, 422, {
      detail: [
        {
          type: 'value_error',
          loc: ['body', 'best_metric'],
          msg: `Value error, unknown metric "val/acuracy": model ${t.model.id} has logged no metric by that name; known: train/exception_rate, train/reward, train/reward_std_dev, val/exception_rate, val/reward, val/reward_std_dev`,
          input: 'val/acuracy',
        },
      ],
    });
  });

  it('answers 404 for a step without a checkpoint and 422 for one that is not a step', async () => {
    await refused('POST', `${t.base}/checkpoints/9/pin`, undefined, 404, { detail: `model ${t.model.id} has no checkpoint at step 9` });
    await refused('POST', `${t.base}/checkpoints/-1/unpin`, undefined, 422, {
      detail: [{ type: 'greater_than_equal', loc: ['path', 'step'], msg: 'Input should be greater than or equal to 0', input: '-1', ctx: { ge: 0 } }],
    });
    await refused('GET', `${t.base}/checkpoints/lifecycle?after=not-a-checkpoint`, undefined, 422, {
      detail: [{ type: 'value_error', loc: ['query', 'after'], msg: `Value error, after is not the id of a checkpoint of model ${t.model.id}`, input: 'not-a-checkpoint' }],
    });
  });
});

describe('another tenant', () => {
  it('answers the best checkpoint by any metric, highest or lowest, ties to the later step, null when none has it', async () => {
    const t = await modelWithWorker(app);
    await train(t, [{ 'val/reward': 0.4, 'loss/train': 0.9 }, { 'val/reward': 0.8, 'loss/train': 0.5 }, { 'val/reward': 0.8 }, { 'val/reward': 0.1, 'loss/train': 0.7 }]);
    const ids = new Map<number, string>((await call(app, t.user.headers, 'GET', `${t.base}/checkpoints?limit=100`)).body.data.map((c: any) => [c.step, c.id]));
    const best = async (query: string) => (await call(app, t.user.headers, 'GET', `${t.base}/checkpoints/best?${query}`)).body;
    expect(await best('metric=val/reward')).toEqual({ metric: 'val/reward', mode: 'max', checkpoint: { id: ids.get(3), step: 3, value: 0.8 } });
    expect(await best('metric=loss/train&mode=min')).toEqual({ metric: 'loss/train', mode: 'min', checkpoint: { id: ids.get(2), step: 2, value: 0.5 } });
    expect(await best('metric=val/reward&mode=min')).toEqual({ metric: 'val/reward', mode: 'min', checkpoint: { id: ids.get(4), step: 4, value: 0.1 } });
    expect(await best('metric=train/reward')).toEqual({ metric: 'train/reward', mode: 'max', checkpoint: null });
    const missing = await call(app, t.user.headers, 'GET', `${t.base}/checkpoints/best`);
    expect(missing.status).toBe(422);
    expect(missing.body).toEqual({ detail: [{ type: 'missing', loc: ['query', 'metric'], msg: 'Field required', input: {} }] });
  });

  it('finds nothing on every lifecycle route (404) and changes nothing; a worker key is refused (403)', async () => {
    const { owner, other } = await createTenants(app);
    const { model, baseModel } = await userWithModel(app, owner);
    const t: Trained = { user: owner, model, worker: await ScriptedWorker.create(app, owner, [baseModel]), base: `/v1/preview/models/${model.id}` };
    await train(t, rewards(0.4));
    const workerKey = await createWorkerKey(app, owner.username);
    const asWorker = { ...owner, headers: workerKey.headers };
    // A key's first use records its last-use time: use both here, so the fingerprints compare refusals only.
    await call(app, other.headers, 'GET', '/v1/preview/base-models');
    await call(app, asWorker.headers, 'GET', '/v1/preview/base-models');
    const notFound = { status: 404 as const, body: { detail: `model ${t.model.id} not found` }, secrets: [t.model.name] };
    await expectOtherTenantRefused(app, json('GET', `${t.base}/retention`, other), notFound);
    await expectOtherTenantRefused(app, json('PUT', `${t.base}/retention`, other, { keep_latest: 1 }), notFound);
    await expectOtherTenantRefused(app, json('POST', `${t.base}/retention/apply`, other), notFound);
    await expectOtherTenantRefused(app, json('GET', `${t.base}/checkpoints/lifecycle`, other), notFound);
    await expectOtherTenantRefused(app, json('GET', `${t.base}/checkpoints/best?metric=val/reward`, other), notFound);
    await expectOtherTenantRefused(app, json('POST', `${t.base}/checkpoints/1/pin`, other), notFound);
    await expectOtherTenantRefused(app, json('POST', `${t.base}/checkpoints/1/unpin`, other), notFound);

    await expectOtherTenantRefused(app, json('POST', `${t.base}/checkpoints/1/pin`, asWorker), {
      status: 403,
      body: { detail: 'Worker keys may only call /v1/workers/*.' },
    });
    expect((await lifecycle(t))[1].pinned).toBe(false);
  });
});
