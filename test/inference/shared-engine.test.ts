import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import type { DatabaseHandle } from '../../src/db/index.js';
import { createUserWithKey, testConfig, type TestUser } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { addCheckpoint, backendEntry, chat, checkpointAdapter, createTrainedModel, modelNotFoundBody, usageRow, writeBackendsFile } from './gateway-helpers.js';
import { waitFor } from './helpers.js';

/**
 * Two server processes (`deleting` and `serving`: two apps, each with its own router, adapter loader and
 * events) share one database and one engine, as several trainyard processes behind a load balancer do.
 * A checkpoint deleted through one must not stay, or come back, in the engine through the other.
 */

let engine: FakeEngine;
let database: DatabaseHandle;
let backendsFile: string;
let deleting: App;
let serving: App;
let user: TestUser;

/** An app on the shared database; the database is closed once, after every app. */
async function serverProcess(): Promise<App> {
  const app = await buildApp(testConfig({ BACKENDS_FILE: backendsFile, USAGE_FLUSH_INTERVAL_MS: '50' }), {
    database: { ...database, close: async () => undefined },
  });
  await app.ready();
  return app;
}

beforeAll(async () => {
  engine = await startFakeEngine();
  database = await freshDatabase();
  backendsFile = writeBackendsFile([backendEntry('main', [engine.url])]);
  deleting = await serverProcess();
  serving = await serverProcess();
  user = await createUserWithKey(deleting);
});
afterAll(async () => {
  await Promise.all([deleting?.close(), serving?.close()]);
  await database?.close();
  await engine?.close();
});

const adapterOf = (name: string, step: number) => checkpointAdapter(deleting, { entity: user.entity, project: 'proj', name, step });

const chatVia = (app: App, model: string, requestId: string) =>
  app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...user.headers, 'x-request-id': requestId }, payload: chat(model) });

async function deleteStep(modelId: string, step: number): Promise<void> {
  const response = await deleting.inject({ method: 'DELETE', url: `/v1/preview/models/${modelId}/checkpoints`, headers: user.headers, payload: { steps: [step] } });
  expect([response.statusCode, response.json()]).toEqual([200, { deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [] }]);
}

/** The engine models the engine was asked for, in order, by the request with this id. */
const sentModels = (requestId: string) => engine.chatRequests().filter((r) => r.headers['x-request-id'] === requestId).map((r) => (r.body as { model: string }).model);

const loadRequested = (adapter: string) =>
  engine.requests.some((r) => r.path === '/v1/load_lora_adapter' && (r.body as { lora_name?: string }).lora_name === adapter);

/** Runs `work` with the engine taking this long for every adapter load. */
async function withSlowLoads<T>(ms: number, work: () => Promise<T>): Promise<T> {
  engine.options.loadDelayMs = ms;
  try {
    return await work();
  } finally {
    engine.options.loadDelayMs = 0;
  }
}

describe('a checkpoint deleted through one process while another process loads its adapter', () => {
  it('answers a request for its step 404 and leaves the adapter out of the engine', async () => {
    const model = await createTrainedModel(deleting, { entity: user.entity, project: 'proj', name: 'inflight', steps: [1, 2] });
    const name = `${user.entity}/proj/inflight:step1`;
    const adapter = await adapterOf('inflight', 1);
    const response = await withSlowLoads(500, async () => {
      const pending = chatVia(serving, name, 'inflight-step');
      await waitFor(() => loadRequested(adapter));
      // The deleting process lists the engine before the load has landed: nothing of it to unload there.
      await deleteStep(model.id, 1);
      return pending;
    });
    expect([response.statusCode, response.json()]).toEqual([404, modelNotFoundBody(name)]);
    expect(sentModels('inflight-step')).toEqual([]);
    expect(engine.adapters.has(adapter)).toBe(false);
    expect([engine.loads.get(adapter), engine.unloads.get(adapter)]).toEqual([1, 1]);
  });

  it('sends a request for the latest checkpoint on to the one that is latest now', async () => {
    const model = await createTrainedModel(deleting, { entity: user.entity, project: 'proj', name: 'inflight-latest', steps: [1] });
    const modelId = `${user.entity}/proj/inflight-latest`;
    const oldAdapter = await adapterOf('inflight-latest', 1);
    const response = await withSlowLoads(500, async () => {
      const pending = chatVia(serving, modelId, 'inflight-latest');
      await waitFor(() => loadRequested(oldAdapter));
      // Step 2 lands and retention deletes step 1, through the other process.
      await addCheckpoint(deleting, model.id, 2, model.uri(2));
      await deleteStep(model.id, 1);
      return pending;
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json().model).toBe(modelId);
    expect(sentModels('inflight-latest')).toEqual([await adapterOf('inflight-latest', 2)]);
    expect(engine.adapters.has(oldAdapter)).toBe(false);
    expect(await usageRow(serving, 'inflight-latest')).toMatchObject({ model: modelId, trained_model: modelId, checkpoint_step: 2, outcome: 'success', status: 200 });
  });
});

describe('a request routed (from the route cache) to a checkpoint that another process has deleted and unloaded', () => {
  it('answers 404 for its step and does not load the adapter back', async () => {
    const model = await createTrainedModel(deleting, { entity: user.entity, project: 'proj', name: 'cached-step', steps: [1, 2] });
    const name = `${user.entity}/proj/cached-step:step1`;
    const adapter = await adapterOf('cached-step', 1);
    expect((await chatVia(serving, name, 'cached-step-1')).statusCode).toBe(200);
    await deleteStep(model.id, 1);
    await waitFor(() => engine.unloads.get(adapter) === 1);
    const response = await chatVia(serving, name, 'cached-step-2');
    expect([response.statusCode, response.json()]).toEqual([404, modelNotFoundBody(name)]);
    // The route came from the cache: the engine was asked for the adapter and no longer had it.
    expect(sentModels('cached-step-2')).toEqual([adapter]);
    expect(engine.adapters.has(adapter)).toBe(false);
    expect(engine.loads.get(adapter)).toBe(1);
  });

  it('follows a request for the latest checkpoint to the one that is latest now', async () => {
    const model = await createTrainedModel(deleting, { entity: user.entity, project: 'proj', name: 'cached-latest', steps: [1] });
    const modelId = `${user.entity}/proj/cached-latest`;
    const oldAdapter = await adapterOf('cached-latest', 1);
    expect((await chatVia(serving, modelId, 'cached-latest-1')).statusCode).toBe(200);
    await addCheckpoint(deleting, model.id, 2, model.uri(2));
    await deleteStep(model.id, 1);
    await waitFor(() => engine.unloads.get(oldAdapter) === 1);
    const response = await chatVia(serving, modelId, 'cached-latest-2');
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json().model).toBe(modelId);
    expect(sentModels('cached-latest-2')).toEqual([oldAdapter, await adapterOf('cached-latest', 2)]);
    expect(engine.adapters.has(oldAdapter)).toBe(false);
    expect(engine.loads.get(oldAdapter)).toBe(1);
    expect(await usageRow(serving, 'cached-latest-2')).toMatchObject({ model: modelId, checkpoint_step: 2, outcome: 'success', status: 200 });
  });

  it('follows a request for the latest checkpoint to the one that is latest now when the deleted files are gone too', async () => {
    const model = await createTrainedModel(deleting, { entity: user.entity, project: 'proj', name: 'files-gone', steps: [1] });
    const modelId = `${user.entity}/proj/files-gone`;
    const oldAdapter = await adapterOf('files-gone', 1);
    expect((await chatVia(serving, modelId, 'files-gone-1')).statusCode).toBe(200);
    await addCheckpoint(deleting, model.id, 2, model.uri(2));
    // The deleting process serves step 2 (loading it), deletes step 1 and removes its files (an import's).
    expect((await chatVia(deleting, modelId, 'files-gone-2')).statusCode).toBe(200);
    await deleteStep(model.id, 1);
    await waitFor(() => engine.unloads.get(oldAdapter) === 1);
    // As vLLM does for a directory that is gone; loading step 1 again would be a 502 adapter_load_failed.
    engine.setLoadBehaviour({ kind: 'status', status: 400, message: 'Loading lora failed: No adapter found for /mnt/ckpts/files-gone/1' });
    try {
      const response = await chatVia(serving, modelId, 'files-gone-3');
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json().model).toBe(modelId);
      expect(sentModels('files-gone-3')).toEqual([oldAdapter, await adapterOf('files-gone', 2)]);
    } finally {
      engine.setLoadBehaviour({ kind: 'ok' });
    }
    expect(engine.loads.get(oldAdapter)).toBe(1);
  });
});

describe('engine discovery', () => {
  it('unloads the adapters of deleted checkpoints the engine still holds, and only trainyard\'s', async () => {
    const model = await createTrainedModel(deleting, { entity: user.entity, project: 'proj', name: 'crashed', steps: [1, 2] });
    const [gone, kept] = [await adapterOf('crashed', 1), await adapterOf('crashed', 2)];
    // Adapters named after a model this database never had (another deployment's), and an operator's.
    const others = [`${user.entity}/proj/never-here:step1@0123456789ab`, 'operator-lora'];
    for (const name of [gone, kept, ...others]) engine.adapters.set(name, `/mnt/ckpts/${name}`);
    // Step 1 was deleted by a process that stopped before it could unload the adapter.
    await sql`delete from checkpoints where model_id = ${model.id} and step = 1`.execute(deleting.db);
    const starting = await serverProcess();
    try {
      await waitFor(() => engine.unloads.get(gone) === 1);
      expect([engine.adapters.has(gone), engine.adapters.has(kept)]).toEqual([false, true]);
      for (const name of others) expect([name, engine.adapters.has(name), engine.unloads.has(name)]).toEqual([name, true, false]);
    } finally {
      await starting.close();
      for (const name of others) engine.adapters.delete(name);
    }
  });
});
