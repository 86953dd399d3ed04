import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import {
  ClaimRequest,
  CompleteRequest,
  CreateSFTTrainingJob,
  CreateTrainingJob,
  DeleteCheckpointsRequest,
  FailRequest,
  HeartbeatRequest,
  LogRequest,
  ModelCreate,
  PostEventsRequest,
} from '../../src/training/schemas.js';
import { createModel, findEntityIds } from '../../src/training/repository.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { call, groupGenerationA, ScriptedWorker, sftRows, storeDataset, type ClaimedJob } from './fixtures.js';

const TRAINABLE = 'OpenPipe/Qwen3-14B-Instruct';
let app: App;
let user: TestUser;
let model: any;
let claimed: ClaimedJob;
let worker: ScriptedWorker;
let datasetRef: string;

beforeAll(async () => {
  // A 1 MB body limit makes the 413 cheap to reach; one trainable base model makes the 422 reachable.
  app = await createTestApp({ BODY_LIMIT_MB: '1', TRAINABLE_BASE_MODELS: `${TRAINABLE}, Qwen/Qwen3-30B-A3B-Instruct-2507` });
  user = await createUserWithKey(app);
  model = (await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'p', name: uniqueName('m'), base_model: TRAINABLE })).body;
  await call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
  worker = await ScriptedWorker.create(app, user, [TRAINABLE]);
  claimed = (await worker.claim())!;
  ({ datasetRef } = await storeDataset(app, user, sftRows(2)));
});
afterAll(async () => {
  await app.close();
});

const asUser = (method: 'POST' | 'DELETE', url: string) => ({ method, url, headers: user.headers });
const asWorker = (url: string) => ({ method: 'POST' as const, url, headers: worker.headers });

describe('every request body is validated, answered in the 422 detail form, and nothing is stored', () => {
  const lease = () => claimed.lease.token;
  const cases = () => [
    { name: 'create model', request: asUser('POST', '/v1/preview/models'), schema: ModelCreate, valid: { entity: null, project: 'p', name: 'n2', base_model: TRAINABLE, return_existing: true } },
    { name: 'delete checkpoints', request: asUser('DELETE', `/v1/preview/models/${model.id}/checkpoints`), schema: DeleteCheckpointsRequest, valid: { steps: [1] } },
    { name: 'log', request: asUser('POST', `/v1/preview/models/${model.id}/log`), schema: LogRequest, valid: { split: 'val', trajectory_groups: [groupGenerationA()] } },
    { name: 'RL job', request: asUser('POST', '/v1/preview/training-jobs'), schema: CreateTrainingJob, valid: { model_id: model.id, trajectory_groups: [groupGenerationA()], experimental_config: null } },
    { name: 'SFT job', request: asUser('POST', '/v1/preview/sft-training-jobs'), schema: CreateSFTTrainingJob, valid: { model_id: model.id, training_data_url: datasetRef, config: { batch_size: 2 } } },
    { name: 'claim', request: asWorker('/v1/workers/claim'), schema: ClaimRequest, valid: { worker_id: 'w', kinds: ['rl'], base_models: ['none'], wait_seconds: 0, resident_trainers: [{ base_model: 'b', model_id: null }] } },
    { name: 'heartbeat', request: asWorker(`/v1/workers/jobs/${claimed.job.id}/heartbeat`), schema: HeartbeatRequest, valid: { lease_token: lease() } },
    {
      name: 'events',
      request: asWorker(`/v1/workers/jobs/${claimed.job.id}/events`),
      schema: PostEventsRequest,
      valid: { lease_token: lease(), events: [{ type: 'training_started', data: { num_sequences: 1 } }] },
    },
    { name: 'complete', request: asWorker(`/v1/workers/jobs/${claimed.job.id}/complete`), schema: CompleteRequest, valid: { lease_token: lease(), checkpoint: { uri: 's3://x', metrics: {} } } },
    { name: 'fail', request: asWorker(`/v1/workers/jobs/${claimed.job.id}/fail`), schema: FailRequest, valid: { lease_token: lease(), error_message: 'x', retryable: true } },
  ];

  // Names are listed here because the bodies need the ids made in beforeAll.
  const names = ['create model', 'delete checkpoints', 'log', 'RL job', 'SFT job', 'claim', 'heartbeat', 'events', 'complete', 'fail'];
  it.each(names)('%s', async (name) => {
    const c = cases().find((candidate) => candidate.name === name)!;
    await expectBadInputRejected(app, { request: c.request, schema: c.schema, valid: c.valid, family: 'training' });
  });
});

describe('rules checked after the schema', () => {
  it('a base model this server does not train is a 422 naming the allowed ones', async () => {
    const before = await databaseFingerprint(app);
    const reply = await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'p', name: 'x', base_model: 'gpt2' });
    expect(reply).toMatchObject({
      status: 422,
      body: {
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'base_model'],
            msg: `Value error, gpt2 is not a trainable base model on this server; use one of: ${TRAINABLE}, Qwen/Qwen3-30B-A3B-Instruct-2507`,
            input: 'gpt2',
            ctx: { allowed: [TRAINABLE, 'Qwen/Qwen3-30B-A3B-Instruct-2507'] },
          },
        ],
      },
    });
    expect(await databaseFingerprint(app)).toEqual(before);
    expect((await call(app, user.headers, 'GET', '/v1/preview/base-models')).body).toEqual([TRAINABLE, 'Qwen/Qwen3-30B-A3B-Instruct-2507']);
  });

  it('a project or model name no checkpoint name could carry is a 422, so no model is registered that could not be served', async () => {
    const before = await databaseFingerprint(app);
    const pattern = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
    for (const [field, value] of [
      ['name', 'agent v1'],
      ['name', 'agent:beta'],
      ['name', '_agent'],
      ['name', 'agent+lora'],
      ['name', 'a/b'],
      ['project', 'My Project'],
    ]) {
      const body = { project: 'p', name: 'agent', base_model: TRAINABLE, [field]: value };
      const reply = await call(app, user.headers, 'POST', '/v1/preview/models', body);
      expect(reply.status, value).toBe(422);
      expect(reply.body).toEqual({
        detail: [{ type: 'string_pattern_mismatch', loc: ['body', field], msg: `String should match pattern '${pattern}'`, input: value, ctx: { pattern } }],
      });
    }
    expect(await databaseFingerprint(app)).toEqual(before);
    const served = await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'Proj.2', name: '0-agent_v1.5', base_model: TRAINABLE });
    expect(served.status).toBe(200);
  });

  it('a model an older release registered under a name the rule now refuses is still answered with return_existing, as ART asks at every start', async () => {
    const entityId = (await findEntityIds(app.db, { names: [user.entity] })).get(user.entity)!;
    const legacy = await createModel(app.db, { entityId, project: '2048 runs', name: 'my agent', baseModel: TRAINABLE });
    const body = { project: '2048 runs', name: 'my agent', base_model: TRAINABLE };
    const again = await call(app, user.headers, 'POST', '/v1/preview/models', { ...body, return_existing: true });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: legacy!.id, project: '2048 runs', name: 'my agent' });
    const before = await databaseFingerprint(app);
    const other = await call(app, user.headers, 'POST', '/v1/preview/models', { ...body, name: 'my agent 2', return_existing: true });
    const pattern = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
    expect(other.status).toBe(422);
    expect(other.body).toEqual({
      detail: [
        { type: 'string_pattern_mismatch', loc: ['body', 'project'], msg: `String should match pattern '${pattern}'`, input: '2048 runs', ctx: { pattern } },
        { type: 'string_pattern_mismatch', loc: ['body', 'name'], msg: `String should match pattern '${pattern}'`, input: 'my agent 2', ctx: { pattern } },
      ],
    });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('a model registered on a base model TRAINABLE_BASE_MODELS has since left out is still answered with return_existing', async () => {
    const entityId = (await findEntityIds(app.db, { names: [user.entity] })).get(user.entity)!;
    const earlier = await createModel(app.db, { entityId, project: 'p', name: 'on-gpt2', baseModel: 'gpt2' });
    const again = await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'p', name: 'on-gpt2', base_model: 'gpt2', return_existing: true });
    expect([again.status, again.body]).toMatchObject([200, { id: earlier!.id, base_model: 'gpt2' }]);
    const without = await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'p', name: 'on-gpt2', base_model: 'gpt2' });
    expect([without.status, without.body.detail[0].msg]).toEqual([422, `Value error, gpt2 is not a trainable base model on this server; use one of: ${TRAINABLE}, Qwen/Qwen3-30B-A3B-Instruct-2507`]);
  });

  it('an experimental_config or SFT config of more than 1,000 keys is a 422 naming it, and no job is queued', async () => {
    const keys = Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`k${i}`, i]));
    const before = await databaseFingerprint(app);
    const rl = await call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()], experimental_config: keys });
    const sft = await call(app, user.headers, 'POST', '/v1/preview/sft-training-jobs', { model_id: model.id, training_data_url: datasetRef, config: keys });
    for (const [reply, field] of [[rl, 'experimental_config'], [sft, 'config']] as const) {
      expect([reply.status, reply.body]).toEqual([
        422,
        {
          detail: [
            {
              type: 'value_error',
              loc: ['body', field],
              msg: `Value error, at most 1000 keys in ${field}`,
              // A 422 echoes the first 2,048 characters of the input's JSON.
              input: `${JSON.stringify(keys).slice(0, 2048)}…`,
              ctx: { error: `at most 1000 keys in ${field}` },
            },
          ],
        },
      ]);
    }
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('a body over the limit is a 413 and nothing is stored', async () => {
    const before = await databaseFingerprint(app);
    const big = { model_id: model.id, trajectory_groups: [{ trajectories: [{ messages_and_choices: [{ role: 'user', content: 'x'.repeat(1_100_000) }] }] }] };
    for (const url of ['/v1/preview/training-jobs', `/v1/preview/models/${model.id}/log`]) {
      const reply = await call(app, user.headers, 'POST', url, { split: 'val', ...big });
      expect(reply.status).toBe(413);
      expect(reply.body).toEqual({ detail: 'Request body is larger than the limit of 1048576 bytes.' });
    }
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});
