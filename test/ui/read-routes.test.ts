import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey } from '../helpers/app.js';
import { call, groupGenerationA, ScriptedWorker, userWithModel } from '../training/fixtures.js';

/** The read routes the web UI needs beyond the existing API: projects, stored trajectories, recent workers. */

let app: App;
beforeAll(async () => {
  app = await createTestApp();
});
afterAll(() => app.close());

describe('GET /v1/projects', () => {
  it('lists the projects with models, traces or usage that the key reaches, and no one else\'s', async () => {
    const { user, model } = await userWithModel(app);
    const other = await createUserWithKey(app);
    await call(app, other.headers, 'POST', '/v1/preview/models', { project: 'hidden', name: 'm', base_model: 'b' });
    const traced = await app.inject({
      method: 'POST',
      url: '/traces/call/start',
      headers: { ...user.headers, 'content-type': 'application/json' },
      payload: JSON.stringify({
        start: { project_id: `${user.entity}/traced`, id: 'c1', trace_id: 't1', op_name: 'op', started_at: new Date().toISOString(), attributes: {}, inputs: {} },
      }),
    });
    expect(traced.statusCode, traced.body).toBe(200);
    const reply = await call(app, user.headers, 'GET', '/v1/projects');
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({
      object: 'list',
      data: [
        { id: `${user.entity}/${model.project}`, entity: user.entity, project: model.project, models: 1 },
        { id: `${user.entity}/traced`, entity: user.entity, project: 'traced', models: 0 },
      ],
    });
  });
});

describe('GET /ui/api/system-check', () => {
  it('answers 200 with the checks of /v1/system-check and whether all passed, and needs a session or key', async () => {
    const user = await createUserWithKey(app);
    const plain = await app.inject({ method: 'GET', url: '/v1/system-check' });
    const reply = await call(app, user.headers, 'GET', '/ui/api/system-check');
    expect(reply.status).toBe(200);
    // No trainer worker has called in on this app: gpu_queue fails, as /v1/system-check's 503 says.
    expect(plain.statusCode).toBe(503);
    expect(Object.keys(reply.body.checks)).toEqual(Object.keys(plain.json()));
    expect(reply.body.healthy).toBe(false);
    expect(reply.body.checks.gpu_queue.success).toBe(false);
    expect(reply.body.checks.database.success).toBe(true);
    const anonymous = await app.inject({ method: 'GET', url: '/ui/api/system-check' });
    expect([anonymous.statusCode, anonymous.json()]).toEqual([
      401,
      { detail: 'Missing API key. Send it as "Authorization: Bearer <key>" (or HTTP Basic with the key as the password).' },
    ]);
    const worker = await createWorkerKey(app, user.username);
    const refused = await app.inject({ method: 'GET', url: '/ui/api/system-check', headers: worker.headers });
    expect([refused.statusCode, refused.json()]).toEqual([403, { detail: 'Worker keys may only call /v1/workers/*.' }]);
  });
});

describe('GET /v1/projects across entities', () => {
  it('includes the projects of the teams the user belongs to', async () => {
    const user = await createUserWithKey(app);
    const team = `team-${user.username}`;
    await app.auth.createTeam({ name: team });
    await app.auth.addMember({ team, username: user.username });
    await call(app, user.headers, 'POST', '/v1/preview/models', { entity: team, project: 'shared', name: 'm', base_model: 'b' });
    await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'mine', name: 'm', base_model: 'b' });
    const reply = await call(app, user.headers, 'GET', '/v1/projects');
    expect(reply.body.data.map((p: any) => p.id).sort()).toEqual([`${team}/shared`, `${user.entity}/mine`].sort());
  });
});

describe('GET /v1/preview/models/{id}/trajectories', () => {
  it('pages the groups logged at one split and step, in log order', async () => {
    const { user, model } = await userWithModel(app);
    const groups = [groupGenerationA([1, 0]), groupGenerationA([0.5, 0.5]), groupGenerationA([0, 0])];
    expect((await call(app, user.headers, 'POST', `/v1/preview/models/${model.id}/log`, { split: 'train', trajectory_groups: groups })).status).toBe(200);
    await call(app, user.headers, 'POST', `/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [groupGenerationA()] });
    const first = await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=train&step=0&limit=2`);
    expect(first.status).toBe(200);
    expect(first.body.data.map((g: any) => g.group.trajectories.map((t: any) => t.reward))).toEqual([[1, 0], [0.5, 0.5]]);
    expect(first.body.data[0]).toMatchObject({ step: 0, split: 'train' });
    expect(first.body.has_more).toBe(true);
    const rest = await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=train&step=0&after=${first.body.last_id}`);
    expect(rest.body.data.map((g: any) => g.group.trajectories.map((t: any) => t.reward))).toEqual([[0, 0]]);
    expect(rest.body.has_more).toBe(false);
    const empty = await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=train&step=5`);
    expect(empty.body).toEqual({ object: 'list', data: [], first_id: '', last_id: '', has_more: false });
  });

  it('needs split and step, and hides other tenants\' models', async () => {
    const { user, model } = await userWithModel(app);
    const missing = await call(app, user.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=train`);
    expect(missing.status).toBe(422);
    expect(missing.body.detail[0].loc).toEqual(['query', 'step']);
    const other = await createUserWithKey(app);
    const hidden = await call(app, other.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=train&step=0`);
    expect(hidden.status).toBe(404);
    expect(hidden.body).toEqual({ detail: `model ${model.id} not found` });
  });
});

describe('GET /v1/admin/workers', () => {
  it('lists workers that called in recently, for admins only', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    const { user, baseModel } = await userWithModel(app);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    await worker.claim();
    const reply = await call(app, admin.headers, 'GET', '/v1/admin/workers');
    expect(reply.status).toBe(200);
    expect(reply.body.data.map((w: any) => w.worker_id)).toContain(worker.workerId);
    const refused = await call(app, user.headers, 'GET', '/v1/admin/workers');
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ detail: 'This route needs an admin key.' });
  });
});
