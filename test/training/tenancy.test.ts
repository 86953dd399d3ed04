import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';
import { createTenants, expectOtherTenantRefused, jsonRequest as json } from '../helpers/tenants.js';
import { call, groupGenerationA, sftRows, storeDataset, userWithModel } from './fixtures.js';

let app: App;
let owner: TestUser;
let other: TestUser;
let model: any;
let jobId: string;
let datasetRef: string;

beforeAll(async () => {
  app = await createTestApp();
  ({ owner, other } = await createTenants(app));
  ({ model } = await userWithModel(app, owner));
  jobId = (await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] })).body.id;
  ({ datasetRef } = await storeDataset(app, owner, sftRows(2), uniqueName('secret-project')));
  // A key's first use records its last-use time; make it here so the fingerprints below compare refusals only.
  await call(app, other.headers, 'GET', '/v1/preview/base-models');
});
afterAll(async () => {
  await app.close();
});


describe('another tenant', () => {
  it('finds none of the owner\'s models, checkpoints, logs, metrics or jobs (404) and changes nothing', async () => {
    const notFoundModel = { status: 404 as const, body: { detail: `model ${model.id} not found` }, secrets: [model.name] };
    const notFoundJob = { status: 404 as const, body: { detail: `training job ${jobId} not found` }, secrets: [model.name] };
    const base = `/v1/preview/models/${model.id}`;
    await expectOtherTenantRefused(app, json('GET', base, other), notFoundModel);
    await expectOtherTenantRefused(app, json('DELETE', base, other), notFoundModel);
    await expectOtherTenantRefused(app, json('GET', `${base}/checkpoints`, other), notFoundModel);
    await expectOtherTenantRefused(app, json('DELETE', `${base}/checkpoints`, other, { steps: [1] }), notFoundModel);
    await expectOtherTenantRefused(app, json('POST', `${base}/log`, other, { split: 'val', trajectory_groups: [groupGenerationA()] }), notFoundModel);
    await expectOtherTenantRefused(app, json('GET', `${base}/metrics`, other), notFoundModel);
    await expectOtherTenantRefused(app, json('POST', '/v1/preview/training-jobs', other, { model_id: model.id, trajectory_groups: [] }), notFoundModel);
    await expectOtherTenantRefused(app, json('POST', '/v1/preview/sft-training-jobs', other, { model_id: model.id, training_data_url: datasetRef }), notFoundModel);
    await expectOtherTenantRefused(app, json('GET', `/v1/preview/training-jobs/${jobId}`, other), notFoundJob);
    await expectOtherTenantRefused(app, json('GET', `/v1/preview/training-jobs/${jobId}/events`, other), notFoundJob);
    await expectOtherTenantRefused(app, json('POST', `/v1/preview/training-jobs/${jobId}/cancel`, other), notFoundJob);
  });

  it('cannot name the owner\'s entity (403), nor train on the owner\'s dataset', async () => {
    const entity = { status: 403 as const, body: { detail: `This API key cannot reach entity ${owner.entity}.` } };
    await expectOtherTenantRefused(app, json('POST', '/v1/preview/models', other, { entity: owner.entity, project: 'p', name: 'n', base_model: 'b' }), entity);
    await expectOtherTenantRefused(app, json('GET', `/v1/preview/models?entity=${owner.entity}`, other), entity);
    const own = await userWithModel(app, other);
    const project = datasetRef.split('/').slice(3, 5).join('/');
    await expectOtherTenantRefused(app, json('POST', '/v1/preview/sft-training-jobs', other, { model_id: own.model.id, training_data_url: datasetRef }), {
      status: 403,
      body: { detail: `This API key cannot reach project ${project}.` },
    });
  });

  it('does not see the owner\'s models or jobs in lists, nor use them as cursors', async () => {
    const models = await call(app, other.headers, 'GET', '/v1/preview/models?limit=100');
    expect(models.body.data.map((m: any) => m.id)).not.toContain(model.id);
    const jobs = await call(app, other.headers, 'GET', '/v1/preview/training-jobs?limit=100');
    expect(jobs.body.data.map((j: any) => j.id)).not.toContain(jobId);
    expect((await call(app, other.headers, 'GET', `/v1/preview/models?after=${model.id}`)).status).toBe(422);
    expect((await call(app, other.headers, 'GET', `/v1/preview/training-jobs?after=${jobId}`)).status).toBe(422);
  });

  it('a team\'s models are reached by every member and by no one else', async () => {
    const team = uniqueName('team');
    await app.auth.createTeam({ name: team });
    const member = await createUserWithKey(app);
    await app.auth.addMember({ team, username: member.username });
    const created = await call(app, member.headers, 'POST', '/v1/preview/models', { entity: team, project: 'shared', name: 'agent', base_model: 'b' });
    expect(created.body).toMatchObject({ entity: team });
    const colleague = await createUserWithKey(app);
    await app.auth.addMember({ team, username: colleague.username });
    expect((await call(app, colleague.headers, 'GET', `/v1/preview/models/${created.body.id}`)).status).toBe(200);
    expect((await call(app, other.headers, 'GET', `/v1/preview/models/${created.body.id}`)).status).toBe(404);
  });
});

describe('key kinds', () => {
  const previewRoutes = (): [InjectOptions['method'], string, unknown?][] => [
    ['POST', '/v1/preview/models', { project: 'p', name: 'n', base_model: 'b' }],
    ['GET', '/v1/preview/models'],
    ['GET', '/v1/preview/base-models'],
    ['GET', `/v1/preview/models/${model.id}`],
    ['DELETE', `/v1/preview/models/${model.id}`],
    ['GET', `/v1/preview/models/${model.id}/checkpoints`],
    ['DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps: [1] }],
    ['POST', `/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [] }],
    ['GET', `/v1/preview/models/${model.id}/metrics`],
    ['POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [] }],
    ['POST', '/v1/preview/sft-training-jobs', { model_id: model.id, training_data_url: datasetRef }],
    ['GET', '/v1/preview/training-jobs'],
    ['GET', `/v1/preview/training-jobs/${jobId}`],
    ['POST', `/v1/preview/training-jobs/${jobId}/cancel`],
    ['GET', `/v1/preview/training-jobs/${jobId}/events`],
  ];

  it('worker keys are refused on every /v1/preview route, even for their own user\'s models', async () => {
    const worker = await createWorkerKey(app, owner.username);
    const as = { ...owner, headers: worker.headers };
    await call(app, worker.headers, 'POST', '/v1/workers/claim', { worker_id: 'warm-up', base_models: ['none'] });
    for (const [method, url, body] of previewRoutes()) {
      await expectOtherTenantRefused(app, json(method, url, as, body), { status: 403, body: { detail: 'Worker keys may only call /v1/workers/*.' } });
    }
  });

  it('user keys are refused on every /v1/workers route', async () => {
    const lease = { lease_token: crypto.randomUUID() };
    const routes: [InjectOptions['method'], string, unknown?][] = [
      ['POST', '/v1/workers/claim', { worker_id: 'w' }],
      ['GET', `/v1/workers/jobs/${jobId}/inputs`],
      ['POST', `/v1/workers/jobs/${jobId}/heartbeat`, lease],
      ['POST', `/v1/workers/jobs/${jobId}/events`, { ...lease, events: [{ type: 'training_started', data: { num_sequences: 1 } }] }],
      ['POST', `/v1/workers/jobs/${jobId}/complete`, { ...lease, checkpoint: { uri: 's3://x' } }],
      ['POST', `/v1/workers/jobs/${jobId}/fail`, { ...lease, error_message: 'x', retryable: false }],
    ];
    for (const [method, url, body] of routes) {
      await expectOtherTenantRefused(app, json(method, url, owner, body), {
        status: 403,
        body: { detail: 'This route is for trainer workers: call it with a worker key (npm run cli -- keys create USER --kind worker).' },
      });
    }
  });
});
