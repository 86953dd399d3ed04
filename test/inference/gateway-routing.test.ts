import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import type { TestUser } from '../helpers/app.js';
import { createTenants, expectOtherTenantRefused } from '../helpers/tenants.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { addCheckpoint, backendEntry, chat, checkpointAdapter, checkpointIds, createGatewayApp, createTrainedModel, modelNotFoundBody, sseData, usageRow } from './gateway-helpers.js';
import { waitFor } from './helpers.js';
import { call, groupGenerationA, ScriptedWorker } from '../training/fixtures.js';

let engine: FakeEngine;
let discovered: FakeEngine;
let app: App;
let owner: TestUser;
let other: TestUser;

beforeAll(async () => {
  engine = await startFakeEngine({ models: ['fake/base-model', 'fake/trainable-base'], loadDelayMs: 50 });
  discovered = await startFakeEngine({ models: ['fake/discovered'] });
  app = await createGatewayApp(
    [
      backendEntry('main', [engine.url], {
        models: ['fake/base-model', 'fake/trainable-base'],
        adapter_paths: [{ prefix: 's3://ckpts/', path: '/mnt/ckpts/' }],
      }),
      backendEntry('found', [discovered.url], { models: 'discover' }),
    ],
    { TRAINABLE_BASE_MODELS: 'fake/trainable-base' },
  );
  ({ owner, other } = await createTenants(app));
  await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'agent', steps: [1, 2] });
});
afterAll(async () => {
  await app.close();
  await Promise.all([engine.close(), discovered.close()]);
});

const post = (user: TestUser, body: unknown) =>
  app.inject({ method: 'POST', url: '/v1/chat/completions', headers: user.headers, payload: body as object });
const lastBody = (e: FakeEngine = engine) => e.chatRequests().at(-1)!.body as Record<string, unknown>;

describe('base models', () => {
  it('are served as the engine serves them, with nothing forced', async () => {
    const response = await post(owner, chat('fake/base-model'));
    expect(response.statusCode).toBe(200);
    expect(response.json().model).toBe('fake/base-model');
    expect(lastBody()).toEqual({ model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi' }] });
  });

  it('carry logprobs and token ids when they are trainable', async () => {
    const response = await post(owner, chat('fake/trainable-base'));
    expect(response.statusCode).toBe(200);
    expect(lastBody()).toMatchObject({ model: 'fake/trainable-base', logprobs: true, return_tokens_as_token_ids: true });
    expect(response.json().choices[0].logprobs.content[0].token).toBe('token_id:1000');
  });

  it('are discovered from the replicas of a backend that lists none', async () => {
    const response = await post(owner, chat('fake/discovered'));
    expect(response.statusCode).toBe(200);
    expect(lastBody(discovered).model).toBe('fake/discovered');
  });
});

describe('trained checkpoints', () => {
  const forms = (e: () => string) => [
    [() => `${e()}/proj/agent:step1`, 1],
    [() => `${e()}/proj/agent:step2`, 2],
    [() => `${e()}/proj/agent`, 2],
    [() => `${e()}/proj/agent:latest`, 2],
    [() => `wandb-artifact:///${e()}/proj/agent:step1`, 1],
    [() => `wandb-artifact:///${e()}/proj/agent`, 2],
    [() => `wandb-artifact://${e()}/proj/agent:step2`, 2],
    [() => `wandb-artifact://${e()}/proj/agent`, 2],
  ] as const;

  it.each(forms(() => owner.entity).map(([id, step], i) => [i, id, step] as const))('form %i routes to its checkpoint\'s adapter', async (_i, id, step) => {
    const modelId = id();
    const response = await post(owner, chat(modelId));
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json().model).toBe(modelId);
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'agent', step });
    expect(adapter).toMatch(new RegExp(`^${owner.entity}/proj/agent:step${step}@[0-9a-f]{12}$`));
    expect(lastBody()).toMatchObject({ model: adapter, logprobs: true, return_tokens_as_token_ids: true });
    // The URI prefix is rewritten to the path the engine reads.
    expect(engine.adapters.get(adapter)).toBe(`/mnt/ckpts/agent/${step}`);
  });

  it('keeps the client\'s id in every streamed chunk', async () => {
    const modelId = `wandb-artifact:///${owner.entity}/proj/agent`;
    const response = await post(owner, chat(modelId, { stream: true }));
    const chunks = sseData(response.body).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    expect(chunks.length).toBeGreaterThan(2);
    for (const chunk of chunks) expect(chunk.model).toBe(modelId);
    expect(chunks[1].choices[0].logprobs.content[0].token).toBe('token_id:1000');
  });

  it('resolves no step to the latest checkpoint as new ones arrive', async () => {
    const moving = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'moving', steps: [1] });
    expect((await post(owner, chat(`${owner.entity}/proj/moving`))).statusCode).toBe(200);
    expect(lastBody().model).toBe(await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'moving', step: 1 }));
    await addCheckpoint(app, moving.id, 7, moving.uri(7));
    // Routes are cached briefly per key; a new key of the same user sees the new checkpoint at once.
    const { key } = await app.auth.createKey({ username: owner.username });
    const response = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: `Bearer ${key}` }, payload: chat(`${owner.entity}/proj/moving`) });
    expect(response.statusCode).toBe(200);
    expect(lastBody().model).toBe(await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'moving', step: 7 }));
  });

  it('routes no step to a checkpoint as soon as its job completes, though a route from before is cached', async () => {
    const created = await call(app, owner.headers, 'POST', '/v1/preview/models', { project: 'proj', name: 'landing', base_model: 'fake/trainable-base' });
    const worker = await ScriptedWorker.create(app, owner, ['fake/trainable-base']);
    const routedTo = async () => {
      expect((await post(owner, chat(`${owner.entity}/proj/landing`))).statusCode).toBe(200);
      return lastBody().model;
    };
    expect(await routedTo()).toBe('fake/trainable-base');
    expect((await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: created.body.id, trajectory_groups: [groupGenerationA()] })).status).toBe(200);
    const claimed = (await worker.claim())!;
    await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 2 } }]);
    expect((await worker.complete(claimed, {}, 's3://ckpts/landing/1')).status).toBe(200);
    expect(await routedTo()).toBe(await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'landing', step: 1 }));
  });

  it('serves step 0 of a trained model by its base model, before and after it has checkpoints', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'pinned' });
    for (const name of [`${owner.entity}/proj/pinned:step0`, `wandb-artifact:///${owner.entity}/proj/pinned:step0`, `${owner.entity}/proj/agent:step0`]) {
      const response = await post(owner, chat(name));
      expect([name, response.statusCode, response.json().model]).toEqual([name, 200, name]);
      expect(lastBody()).toMatchObject({ model: 'fake/base-model', logprobs: true, return_tokens_as_token_ids: true });
    }
    expect(await usageRow(app, (await post(owner, chat(`${owner.entity}/proj/pinned:step0`))).headers['x-request-id'] as string)).toMatchObject({
      trained_model: `${owner.entity}/proj/pinned`,
      checkpoint_step: null,
    });
  });

  it('serves a trained model with no checkpoint yet by its base model, as a rollout', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'fresh' });
    const response = await post(owner, chat(`wandb-artifact:///${owner.entity}/proj/fresh`));
    expect(response.statusCode).toBe(200);
    expect(response.json().model).toBe(`wandb-artifact:///${owner.entity}/proj/fresh`);
    expect(lastBody()).toMatchObject({ model: 'fake/base-model', logprobs: true, return_tokens_as_token_ids: true });
  });

  it('leaves logprobs fields the client set', async () => {
    await post(owner, chat(`${owner.entity}/proj/agent`, { logprobs: false }));
    expect(lastBody()).toMatchObject({ logprobs: false, return_tokens_as_token_ids: true });
  });

  it('answers 404 for a step that does not exist', async () => {
    const response = await post(owner, chat(`${owner.entity}/proj/agent:step99`));
    expect(response.statusCode).toBe(404);
    expect(response.json().error).toEqual({
      message: `The model ${owner.entity}/proj/agent has no checkpoint at step 99.`,
      type: 'invalid_request_error',
      param: 'model',
      code: 'model_not_found',
    });
  });

  it('answers another tenant 404 without saying the model exists', async () => {
    // Settle background writes first: buffered usage rows, and the key's last-used stamp.
    await app.inject({ method: 'GET', url: '/v1/usage', headers: other.headers });
    await app.inject({ method: 'GET', url: '/v1/usage', headers: other.headers });
    for (const modelId of [`${owner.entity}/proj/agent:step1`, `wandb-artifact:///${owner.entity}/proj/agent`, `${owner.entity}/proj/nothing-here`]) {
      await expectOtherTenantRefused(
        app,
        { method: 'POST', url: '/v1/chat/completions', headers: other.headers, payload: chat(modelId) },
        {
          status: 404,
          body: modelNotFoundBody(modelId),
          secrets: ['s3://', 'fake/base-model', 'step2'],
        },
      );
    }
  });

  it('loads an adapter once under 50 concurrent first requests', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'burst', steps: [5] });
    const responses = await Promise.all(Array.from({ length: 50 }, () => post(owner, chat(`${owner.entity}/proj/burst`))));
    expect(responses.map((r) => r.statusCode)).toEqual(Array(50).fill(200));
    expect(engine.loads.get(await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'burst', step: 5 }))).toBe(1);
  });

  it('loads again an adapter the engine lost (a restart)', async () => {
    await post(owner, chat(`${owner.entity}/proj/agent:step1`));
    const name = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'agent', step: 1 });
    const loads = engine.loads.get(name)!;
    engine.adapters.delete(name);
    const response = await post(owner, chat(`${owner.entity}/proj/agent:step1`));
    expect(response.statusCode).toBe(200);
    expect(engine.loads.get(name)).toBe(loads + 1);
  });

  it('unloads the adapters of deleted checkpoints from the engines', async () => {
    const doomed = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'doomed', steps: [1, 2] });
    for (const step of [1, 2]) expect((await post(owner, chat(`${owner.entity}/proj/doomed:step${step}`))).statusCode).toBe(200);
    const [first, second] = [
      await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'doomed', step: 1 }),
      await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'doomed', step: 2 }),
    ];
    const ids = await checkpointIds(app, doomed.id);
    await sql`delete from checkpoints where model_id = ${doomed.id}`.execute(app.db);
    app.events.emit('checkpoints-deleted', { entity: owner.entity, project: 'proj', model: 'doomed', steps: [1, 2], uris: [doomed.uri(1), doomed.uri(2)], ids });
    await waitFor(() => engine.unloads.get(second) === 1);
    expect(engine.unloads.get(first)).toBe(1);
    expect((await post(owner, chat(`${owner.entity}/proj/doomed:step1`))).statusCode).toBe(404);
    // With no checkpoint left, the model is its base model again.
    expect((await post(owner, chat(`${owner.entity}/proj/doomed`))).statusCode).toBe(200);
    expect(lastBody().model).toBe('fake/base-model');
  });
  it('answers 404 to a request routed before its checkpoint was deleted, and does not load the adapter back', async () => {
    const late = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'late', steps: [1] });
    const name = `${owner.entity}/proj/late:step1`;
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'late', step: 1 });
    const ids = await checkpointIds(app, late.id);
    // The first answer asks for a retry a second later: the request waits with its route (and adapter) read.
    engine.setBehaviour({ kind: 'status', status: 503, retryAfter: '1' }, 1);
    const pending = post(owner, chat(name));
    await waitFor(() => engine.adapters.has(adapter));
    await sql`delete from checkpoints where model_id = ${late.id}`.execute(app.db);
    app.events.emit('checkpoints-deleted', { entity: owner.entity, project: 'proj', model: 'late', steps: [1], uris: [late.uri(1)], ids });
    await waitFor(() => engine.unloads.get(adapter) === 1);
    const response = await pending;
    expect([response.statusCode, response.json()]).toEqual([
      404,
      { error: { message: `The model \`${name}\` does not exist or you do not have access to it.`, type: 'invalid_request_error', param: 'model', code: 'model_not_found' } },
    ]);
    expect(engine.adapters.has(adapter)).toBe(false);
    expect(engine.loads.get(adapter)).toBe(1);
  });

  it.each([false, true])('follows a request for the latest checkpoint to the newer one when its route\'s checkpoint is deleted meanwhile (stream: %s)', async (stream) => {
    const name = `rolling-${stream}`;
    const rolling = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name, steps: [1] });
    const modelId = `${owner.entity}/proj/${name}`;
    const [first] = await checkpointIds(app, rolling.id);
    const stepAdapter = (step: number) => checkpointAdapter(app, { entity: owner.entity, project: 'proj', name, step });
    const oldAdapter = await stepAdapter(1);
    // Step 1 serves the request's first try, which is told to come back a second later; meanwhile step 2
    // lands and retention deletes step 1.
    engine.setBehaviour({ kind: 'status', status: 503, retryAfter: '1' }, 1);
    const pending = app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...owner.headers, 'x-request-id': `rolling-${stream}` }, payload: chat(modelId, { stream }) });
    await waitFor(() => engine.adapters.has(oldAdapter));
    await addCheckpoint(app, rolling.id, 2, rolling.uri(2));
    await sql`delete from checkpoints where id = ${first}`.execute(app.db);
    app.events.emit('checkpoints-deleted', { entity: owner.entity, project: 'proj', model: name, steps: [1], uris: [rolling.uri(1)], ids: [first] });
    const response = await pending;
    expect(response.statusCode, response.body).toBe(200);
    const answered = stream ? JSON.parse(sseData(response.body)[0]).model : response.json().model;
    expect(answered).toBe(modelId);
    expect(lastBody().model).toBe(await stepAdapter(2));
    expect(engine.loads.get(oldAdapter)).toBe(1);
    expect(await usageRow(app, `rolling-${stream}`)).toMatchObject({ model: modelId, trained_model: modelId, checkpoint_step: 2, outcome: 'success', status: 200 });
  });

  it('unloads the adapters of deleted checkpoints that another server process loaded into a shared engine', async () => {
    const shared = await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'shared', steps: [1, 2, 3] });
    const adapters = await Promise.all([1, 2, 3].map((step) => checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'shared', step })));
    // Another process loaded steps 1 and 2 after this one last read the engine's list; step 3 was never loaded.
    for (const name of adapters.slice(0, 2)) engine.adapters.set(name, `/mnt/ckpts/${name}`);
    const ids = await checkpointIds(app, shared.id);
    await sql`delete from checkpoints where model_id = ${shared.id}`.execute(app.db);
    app.events.emit('checkpoints-deleted', { entity: owner.entity, project: 'proj', model: 'shared', steps: [1, 2, 3], uris: [1, 2, 3].map((step) => shared.uri(step)), ids });
    await waitFor(() => engine.unloads.get(adapters[1]) === 1);
    await waitFor(() => engine.unloads.get(adapters[0]) === 1);
    expect(engine.unloads.has(adapters[2])).toBe(false);
    expect([...engine.adapters.keys()].filter((name) => name.startsWith(`${owner.entity}/proj/shared:`))).toEqual([]);
    // Another tenant's adapters with the same model name are left alone.
    const theirAdapter = `${other.entity}/proj/shared:step1@0123456789ab`;
    engine.adapters.set(theirAdapter, '/mnt/ckpts/theirs');
    engine.adapters.set(adapters[0], '/mnt/ckpts/again');
    app.events.emit('checkpoints-deleted', { entity: owner.entity, project: 'proj', model: 'shared', steps: [1], uris: [shared.uri(1)], ids: ids.slice(0, 1) });
    await waitFor(() => engine.unloads.get(adapters[0]) === 2);
    expect(engine.adapters.has(theirAdapter)).toBe(true);
    expect(engine.unloads.has(theirAdapter)).toBe(false);
  });
});

describe('an engine that answers 404 for a checkpoint even after the reload', () => {
  it('says so with the checkpoint\'s name, not the engine\'s name for its adapter', async () => {
    const name = `${owner.entity}/proj/agent:step1`;
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'agent', step: 1 });
    expect(adapter).toMatch(/@[0-9a-f]{12}$/);
    // vLLM's wording names the model it was sent: the first answer and the one after the reload.
    engine.setBehaviour({ kind: 'status', status: 404, message: `The model \`${adapter}\` does not exist.` }, 2);
    const response = await post(owner, chat(name));
    expect([response.statusCode, response.json()]).toEqual([
      404,
      { error: { message: `The model \`${name}\` does not exist.`, type: 'invalid_request_error', param: null, code: 'model_not_found' } },
    ]);
  });
});

describe('an engine error event in a checkpoint\'s stream', () => {
  it('names the checkpoint, not the engine\'s name for its adapter', async () => {
    const name = `${owner.entity}/proj/agent:step1`;
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'agent', step: 1 });
    engine.setBehaviour({ kind: 'error-event-after', chunks: 1, message: `LoRA ${adapter} failed: out of slots` }, 1);
    const response = await post(owner, chat(name, { stream: true }));
    expect(sseData(response.body).slice(-2)).toEqual([
      JSON.stringify({ error: { message: `LoRA ${name} failed: out of slots`, type: 'server_error', param: null, code: 'upstream_error' } }),
      '[DONE]',
    ]);
  });
});

describe('the model list', () => {
  it('holds the served base models (with the engine\'s max_model_len) and the caller\'s trained models and checkpoints, parented by their base', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/models', headers: owner.headers });
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body.object).toBe('list');
    const byId = new Map(body.data.map((m: { id: string }) => [m.id, m]));
    for (const id of ['fake/base-model', 'fake/trainable-base', 'fake/discovered']) {
      expect(byId.get(id)).toEqual({ id, object: 'model', created: expect.any(Number), owned_by: expect.any(String), root: id, parent: null, max_model_len: 4096, permission: [expect.objectContaining({ object: 'model_permission', allow_sampling: true })] });
    }
    for (const id of [`${owner.entity}/proj/agent`, `${owner.entity}/proj/agent:step1`, `${owner.entity}/proj/agent:step2`, `${owner.entity}/proj/fresh`]) {
      // Rooted at their own name: never the engine's adapter name or the weights' path.
      expect(byId.get(id)).toEqual({ id, object: 'model', created: expect.any(Number), owned_by: owner.entity, root: id, parent: 'fake/base-model', max_model_len: 4096, permission: [expect.objectContaining({ id: `modelperm-${id}`, object: 'model_permission' })] });
    }
    expect(byId.has(`${owner.entity}/proj/fresh:step1`)).toBe(false);
  });

  it('shows another tenant none of them', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/models', headers: other.headers });
    expect(response.body).not.toContain(owner.entity);
    expect(response.json().data.map((m: { id: string }) => m.id).sort()).toEqual(['fake/base-model', 'fake/discovered', 'fake/trainable-base']);
  });
});
