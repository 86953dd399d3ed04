import { afterEach, describe, expect, it } from 'vitest';
import { BackendRegistry } from '../../src/inference/backends/registry.js';
import type { Logger } from '../../src/inference/logger.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendFor, deadUrl } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

const warnings: object[] = [];
const log: Logger = { info: () => undefined, warn: (o) => void warnings.push(o), error: () => undefined };

async function engine(models: string[]): Promise<FakeEngine> {
  const started = await startFakeEngine({ models });
  cleanups.push(() => started.close());
  return started;
}

function registry(...args: ConstructorParameters<typeof BackendRegistry>): BackendRegistry {
  const created = new BackendRegistry(...args);
  cleanups.push(() => created.close());
  return created;
}

describe('BackendRegistry', () => {
  it('serves the models a backend lists without asking its engines', async () => {
    const r = registry([backendFor(['http://127.0.0.1:9'], { models: ['a/listed'] })], log);
    expect(r.lookup('a/listed')?.backend.backend.name).toBe('test-backend');
    expect(await r.find('a/other')).toBeUndefined();
  });

  it('discovers base models from every replica and lets the first backend win a shared name', async () => {
    const one = await engine(['m/one', 'm/shared']);
    const two = await engine(['m/two', 'm/shared']);
    const r = registry(
      [backendFor([one.url], { name: 'first', models: 'discover' }), backendFor([two.url], { name: 'second', models: 'discover' })],
      log,
    );
    r.start();
    const served = await r.list();
    expect(served.map((m) => [m.id, m.backend.backend.name]).sort()).toEqual([
      ['m/one', 'first'],
      ['m/shared', 'first'],
      ['m/two', 'second'],
    ]);
  });

  it('marks adapters an engine already holds as loaded, so they are not loaded again', async () => {
    const e = await engine(['m/base']);
    e.adapters.set('team/p/agent:step3', '/ckpts/3');
    const r = registry([backendFor([e.url], { models: 'discover', runtimeLora: true })], log);
    r.start();
    await r.list();
    const client = r.clients[0];
    expect(client.adapters.isLoaded(client.replicas[0], 'team/p/agent:step3')).toBe(true);
    expect(client.adapters.isLoaded(client.replicas[0], 'team/p/agent:step4')).toBe(false);
  });

  it('keeps what a backend served when its engines stop answering, and finds models that appear later', async () => {
    const e = await engine(['m/base']);
    const r = registry([backendFor([e.url, await deadUrl(() => startFakeEngine())], { models: 'discover' })], log, { missRefreshMs: 0 });
    r.start();
    expect((await r.list()).map((m) => m.id)).toEqual(['m/base']);
    e.options.models.push('m/new');
    expect((await r.find('m/new'))?.id).toBe('m/new');
    await e.close();
    await r.discover();
    expect(r.lookup('m/base')).toBeDefined();
    expect(warnings.length).toBeGreaterThan(0);
  });
});

describe('BackendRegistry and adapter-shaped ids', () => {
  it('never takes a checkpoint-shaped id an engine lists without parent as a base model', async () => {
    const e = await startFakeEngine({ models: ['m/base', 'org/family/model'], adaptersWithoutParent: true });
    cleanups.push(() => e.close());
    e.adapters.set('acme/agents/a1:step3@0123456789ab', '/ckpt/a1/3');
    e.adapters.set('acme/agents/a1:step2', '/ckpt/a1/2');
    const r = registry([backendFor([e.url], { models: 'discover', runtimeLora: true })], log);
    await r.discover();
    expect((await r.list()).map((m) => m.id).sort()).toEqual(['m/base', 'org/family/model']);
    expect(r.lookup('acme/agents/a1:step3@0123456789ab')).toBeUndefined();
    expect(r.lookup('acme/agents/a1:step2')).toBeUndefined();
    // They are known as adapters the engine holds, so deletion can unload them.
    const client = r.clients[0];
    expect(client.adapters.isLoaded(client.replicas[0], 'acme/agents/a1:step3@0123456789ab')).toBe(true);
    expect(client.adapters.isLoaded(client.replicas[0], 'acme/agents/a1:step2')).toBe(true);
  });
});
