import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import type { TestUser } from '../helpers/app.js';
import { testConfig } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
import { createTenants } from '../helpers/tenants.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, chat, checkpointAdapter, createTrainedModel, writeBackendsFile } from './gateway-helpers.js';

let engine: FakeEngine;
/** Two replicas of another backend. */
let pair: FakeEngine[];
let app: App;
let owner: TestUser;
const lines: Record<string, unknown>[] = [];

beforeAll(async () => {
  engine = await startFakeEngine({ models: ['fake/base-model'] });
  pair = await Promise.all([0, 1].map(() => startFakeEngine({ models: ['fake/pair-model'], loadDelayMs: 30 })));
  const backends = writeBackendsFile([
    backendEntry('main', [engine.url], { adapter_paths: [{ prefix: 's3://ckpts/', path: '/mnt/ckpts/' }] }),
    backendEntry('pair', pair.map((e) => e.url), { models: ['fake/pair-model'] }),
  ]);
  app = await buildApp(testConfig({ BACKENDS_FILE: backends, LOG_LEVEL: 'info' }), {
    database: await freshDatabase(),
    logStream: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  });
  await app.ready();
  ({ owner } = await createTenants(app));
});
afterAll(async () => {
  await app.close();
  await Promise.all([engine, ...pair].map((e) => e.close()));
});

const post = (model: string) => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: owner.headers, payload: chat(model) });
const loadLines = (adapter: string) => lines.filter((line) => line.adapter === adapter);

/** The value of one series of `trainyard_adapter_loads_total` in /metrics (0 when absent). */
async function loadCount(labels: { kind: string; outcome: string }, where = { backend: 'main', replica: engine.url }): Promise<number> {
  const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
  const series = `trainyard_adapter_loads_total{backend="${where.backend}",replica="${where.replica}",kind="${labels.kind}",outcome="${labels.outcome}"}`;
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

describe('adapter loads are visible in the log and in /metrics', () => {
  it('logs the first load of a checkpoint at info with the replica, checkpoint, path and time taken, and counts it', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'seen', steps: [2] });
    const before = await loadCount({ kind: 'load', outcome: 'loaded' });
    expect((await post(`${owner.entity}/proj/seen:step2`)).statusCode).toBe(200);
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'seen', step: 2 });
    const [line, ...more] = loadLines(adapter);
    expect(more).toEqual([]);
    expect(line).toMatchObject({
      level: 30,
      msg: 'loaded an adapter into an engine',
      backend: 'main',
      replica: engine.url,
      checkpoint: `${owner.entity}/proj/seen:step2`,
      path: '/mnt/ckpts/seen/2',
      reload: false,
    });
    expect(typeof line!.ms).toBe('number');
    expect(await loadCount({ kind: 'load', outcome: 'loaded' })).toBe(before + 1);

    // A checkpoint already loaded costs no second load.
    expect((await post(`${owner.entity}/proj/seen:step2`)).statusCode).toBe(200);
    expect(loadLines(adapter)).toHaveLength(1);
  });

  it('logs and counts a reload after the engine lost the adapter (a restart)', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'lost', steps: [1] });
    expect((await post(`${owner.entity}/proj/lost:step1`)).statusCode).toBe(200);
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'lost', step: 1 });
    const reloads = await loadCount({ kind: 'reload', outcome: 'loaded' });
    engine.adapters.delete(adapter);
    expect((await post(`${owner.entity}/proj/lost:step1`)).statusCode).toBe(200);
    expect(loadLines(adapter).map((line) => [line.msg, line.reload])).toEqual([
      ['loaded an adapter into an engine', false],
      ['reloaded an adapter the engine had lost', true],
    ]);
    expect(await loadCount({ kind: 'reload', outcome: 'loaded' })).toBe(reloads + 1);
  });

  it('reloads an adapter once per replica after the engines restart, however many requests meet the restart', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'restarted', baseModel: 'fake/pair-model', steps: [1] });
    const model = `${owner.entity}/proj/restarted:step1`;
    const burst = async (n: number) => expect((await Promise.all(Array.from({ length: n }, () => post(model)))).map((r) => r.statusCode)).toEqual(Array(n).fill(200));
    await burst(8);
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'restarted', step: 1 });
    expect(pair.map((e) => e.loads.get(adapter))).toEqual([1, 1]);
    const loadCalls = (e: FakeEngine) => e.requests.filter((r) => r.path === '/v1/load_lora_adapter').length;
    const callsBefore = pair.map(loadCalls);
    const where = pair.map((e) => ({ backend: 'pair', replica: e.url }));
    const reloadsBefore = await Promise.all(where.map((w) => loadCount({ kind: 'reload', outcome: 'loaded' }, w)));

    for (const e of pair) e.adapters.clear(); // both engines restarted: they hold no adapter
    await burst(20);
    expect(pair.map(loadCalls)).toEqual(callsBefore.map((n) => n + 1));
    expect(await Promise.all(where.map((w) => loadCount({ kind: 'reload', outcome: 'loaded' }, w)))).toEqual(reloadsBefore.map((n) => n + 1));
    expect(await Promise.all(where.map((w) => loadCount({ kind: 'reload', outcome: 'failed' }, w)))).toEqual([0, 0]);
  });

  it('answers an adapter the engine cannot read with 502 naming the checkpoint, not the path; the log names the path', async () => {
    await createTrainedModel(app, { entity: owner.entity, project: 'proj', name: 'unreadable', steps: [3] });
    const failed = await loadCount({ kind: 'load', outcome: 'failed' });
    engine.setLoadBehaviour({ kind: 'status', status: 404, message: 'Loading lora x failed: No adapter found for /mnt/ckpts/unreadable/3' }, 1);
    const response = await post(`${owner.entity}/proj/unreadable:step3`);
    expect(response.statusCode).toBe(502);
    expect(response.body).not.toContain('/mnt/ckpts');
    expect(response.json()).toEqual({
      error: {
        message: `The engine could not load the weights of checkpoint ${owner.entity}/proj/unreadable:step3 (it answered 404); the server log has the engine's message.`,
        type: 'server_error',
        param: null,
        code: 'adapter_load_failed',
      },
    });
    const adapter = await checkpointAdapter(app, { entity: owner.entity, project: 'proj', name: 'unreadable', step: 3 });
    const [line] = loadLines(adapter);
    expect(line).toMatchObject({ level: 40, msg: 'could not load an adapter into an engine', path: '/mnt/ckpts/unreadable/3', reload: false });
    expect(JSON.stringify(line)).toContain('No adapter found for /mnt/ckpts/unreadable/3');
    expect(await loadCount({ kind: 'load', outcome: 'failed' })).toBe(failed + 1);
  });
});
