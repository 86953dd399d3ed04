import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';
import { call, groupGenerationA, ScriptedWorker, type ClaimedJob } from './fixtures.js';

/**
 * Workers shared between teams: claims take entities in turn (oldest job first within one), and
 * MAX_RUNNING_JOBS_PER_ENTITY bounds how many jobs of one entity run at once.
 */

/** A model of `owner` on `baseModel` with `jobs` queued RL jobs; answers the job ids in creation order. */
async function queueJobs(app: App, owner: TestUser, baseModel: string, jobs: number): Promise<string[]> {
  const model = await call(app, owner.headers, 'POST', '/v1/preview/models', { project: 'fair', name: uniqueName('agent'), base_model: baseModel });
  expect(model.status, model.text).toBe(200);
  const ids: string[] = [];
  for (let i = 0; i < jobs; i++) {
    const job = await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.body.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);
    ids.push(job.body.id);
  }
  return ids;
}

/** A worker of the operator's shared pool: an admin's worker key reaches every entity's jobs. */
async function poolWorker(app: App, baseModel: string): Promise<ScriptedWorker> {
  const admin = await createUserWithKey(app, { prefix: 'operator', isAdmin: true });
  return new ScriptedWorker(app, (await createWorkerKey(app, admin.username)).headers, [baseModel], uniqueName('pool-worker'));
}

async function claimOrFail(worker: ScriptedWorker): Promise<ClaimedJob> {
  const claimed = await worker.claim();
  if (!claimed) throw new Error('expected a job to claim');
  return claimed;
}

describe('one worker shared by two teams', () => {
  let app: App;
  beforeAll(async () => {
    app = await createTestApp();
  });
  afterAll(async () => {
    await app.close();
  });

  it('takes their queued jobs in turn, each team\'s oldest first, though one team queued all of its jobs first', async () => {
    const baseModel = uniqueName('Qwen/Qwen3-14B');
    const busy = await createUserWithKey(app, { prefix: 'busy-team' });
    const quiet = await createUserWithKey(app, { prefix: 'quiet-team' });
    // The busy team queues twelve jobs on three models before the quiet team queues its four.
    const busyJobs = [
      ...(await queueJobs(app, busy, baseModel, 4)),
      ...(await queueJobs(app, busy, baseModel, 4)),
      ...(await queueJobs(app, busy, baseModel, 4)),
    ];
    const quietJobs = await queueJobs(app, quiet, baseModel, 4);
    const worker = await poolWorker(app, baseModel);

    const order: string[] = [];
    for (let i = 0; i < busyJobs.length + quietJobs.length; i++) {
      const claimed = await claimOrFail(worker);
      order.push(claimed.job.model.entity === busy.entity ? 'busy' : 'quiet');
      expect((await worker.complete(claimed)).status).toBe(200);
    }
    expect(await worker.claim()).toBeUndefined();
    expect(order).toEqual(['busy', 'quiet', 'busy', 'quiet', 'busy', 'quiet', 'busy', 'quiet', 'busy', 'busy', 'busy', 'busy', 'busy', 'busy', 'busy', 'busy']);
  });

  it('keeps first come, first served within one team, across its models', async () => {
    const baseModel = uniqueName('Qwen/Qwen3-14B');
    const team = await createUserWithKey(app, { prefix: 'team' });
    const first = await queueJobs(app, team, baseModel, 2);
    const second = await queueJobs(app, team, baseModel, 2);
    const worker = await poolWorker(app, baseModel);
    const claimed: string[] = [];
    for (let i = 0; i < 4; i++) {
      const job = await claimOrFail(worker);
      claimed.push(job.job.id);
      expect((await worker.complete(job)).status).toBe(200);
    }
    expect(claimed).toEqual([first[0], first[1], second[0], second[1]]);
  });
});

describe('MAX_RUNNING_JOBS_PER_ENTITY', () => {
  let app: App;
  beforeAll(async () => {
    app = await createTestApp({ MAX_RUNNING_JOBS_PER_ENTITY: '2' });
  });
  afterAll(async () => {
    await app.close();
  });

  it('passes over a team that runs its limit and serves it again when one of its jobs ends', async () => {
    const baseModel = uniqueName('Qwen/Qwen3-14B');
    const busy = await createUserWithKey(app, { prefix: 'busy-team' });
    const quiet = await createUserWithKey(app, { prefix: 'quiet-team' });
    // Three models, so that the one-job-per-model rule does not hold the busy team back by itself.
    const busyJobs = [
      ...(await queueJobs(app, busy, baseModel, 1)),
      ...(await queueJobs(app, busy, baseModel, 1)),
      ...(await queueJobs(app, busy, baseModel, 1)),
    ];
    const worker = await poolWorker(app, baseModel);

    const a = await claimOrFail(worker);
    const b = await claimOrFail(worker);
    expect([a.job.id, b.job.id]).toEqual(busyJobs.slice(0, 2));
    // Two of the busy team's jobs run: its third waits although a worker asks.
    expect(await worker.claim()).toBeUndefined();

    const [quietJob] = await queueJobs(app, quiet, baseModel, 1);
    expect((await claimOrFail(worker)).job.id).toBe(quietJob);
    expect(await worker.claim()).toBeUndefined();

    expect((await worker.complete(a)).status).toBe(200);
    expect((await claimOrFail(worker)).job.id).toBe(busyJobs[2]);
  });

  it('holds under concurrent claims: never more than the limit of one team running at once', async () => {
    const baseModel = uniqueName('Qwen/Qwen3-14B');
    const teams = [await createUserWithKey(app, { prefix: 'team-a' }), await createUserWithKey(app, { prefix: 'team-b' })];
    for (const team of teams) for (let m = 0; m < 4; m++) await queueJobs(app, team, baseModel, 1);
    const workers = await Promise.all(Array.from({ length: 8 }, () => poolWorker(app, baseModel)));

    // Eight workers claim at once (on PostgreSQL through the pool's separate connections).
    const claims = await Promise.all(workers.map((worker) => worker.claim()));
    const running = claims.filter((claim): claim is ClaimedJob => claim !== undefined);
    const perTeam = teams.map((team) => running.filter((claim) => claim.job.model.entity === team.entity).length);
    expect(perTeam).toEqual([2, 2]);
    const listed = await Promise.all(
      teams.map(async (team) => (await call(app, team.headers, 'GET', '/v1/preview/training-jobs?status=RUNNING&limit=100')).body.data.length),
    );
    expect(listed).toEqual([2, 2]);
  });
});
