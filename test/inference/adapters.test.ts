import { afterEach, describe, expect, it } from 'vitest';
import { BackendClient } from '../../src/inference/proxy/client.js';
import { EngineFault, RequestAbortedError, RetiredAdapterError } from '../../src/inference/proxy/errors.js';
import { startFakeEngine, type FakeEngine, type FakeEngineOptions } from '../fakes/engine.js';
import { backendFor, chatBody, waitFor } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

async function engine(options: FakeEngineOptions = {}): Promise<FakeEngine> {
  const started = await startFakeEngine(options);
  cleanups.push(() => started.close());
  return started;
}

function client(replicas: string[], timeouts: { adapterLoadMs?: number } = {}): BackendClient {
  const created = new BackendClient(backendFor(replicas, { timeouts }));
  cleanups.push(() => created.close());
  return created;
}

const adapter = { name: 'acme/agents/agent-001:step3', path: '/ckpt/agent-001/3' };
const sendWithAdapter = (c: BackendClient, signal?: AbortSignal) =>
  c.send({ path: '/v1/chat/completions', body: chatBody({ model: adapter.name }), adapter, signal }).then(async (r) => JSON.parse((await r.bytes()).toString()));

describe('adapter loading', () => {
  it('loads an adapter once on its replica under 50 concurrent first requests', async () => {
    const e = await engine({ loadDelayMs: 50 });
    const c = client([e.url]);
    const results = await Promise.all(Array.from({ length: 50 }, () => sendWithAdapter(c)));
    expect(results).toHaveLength(50);
    expect(e.loads.get(adapter.name)).toBe(1);
    expect(e.requests.find((r) => r.path === '/v1/load_lora_adapter')?.body).toEqual({ lora_name: adapter.name, lora_path: adapter.path });
  });

  it('loads an adapter once on every replica that serves it', async () => {
    const [a, b] = [await engine({ loadDelayMs: 20 }), await engine({ loadDelayMs: 20 })];
    const c = client([a.url, b.url]);
    await Promise.all(Array.from({ length: 50 }, () => sendWithAdapter(c)));
    expect([a.loads.get(adapter.name), b.loads.get(adapter.name)]).toEqual([1, 1]);
  });

  it('tries the load again after a failed one', async () => {
    const e = await engine();
    const c = client([e.url]);
    await expect(c.send({ path: '/v1/chat/completions', body: chatBody(), adapter: { name: 'x', path: '' } })).rejects.toMatchObject({
      statusCode: 502,
      code: 'adapter_load_failed',
    });
    expect(c.adapters.isLoaded(c.replicas[0], 'x')).toBe(false);
  });

  it('treats an adapter the engine already has as loaded', async () => {
    const e = await engine();
    e.adapters.set(adapter.name, adapter.path);
    const c = client([e.url]);
    await sendWithAdapter(c);
    expect(e.loads.get(adapter.name)).toBeUndefined();
    expect(c.adapters.isLoaded(c.replicas[0], adapter.name)).toBe(true);
  });

  it('skips the load for adapters marked as loaded from the engine model list', async () => {
    const e = await engine();
    e.adapters.set(adapter.name, adapter.path);
    const c = client([e.url]);
    const served = await c.listModels();
    c.adapters.markLoaded(c.replicas[0], served.filter((m) => m.parent).map((m) => m.id));
    await sendWithAdapter(c);
    expect(e.requests.filter((r) => r.path === '/v1/load_lora_adapter')).toHaveLength(0);
  });

  it('lets a caller stop waiting without cancelling the shared load', async () => {
    const e = await engine({ loadDelayMs: 100 });
    const c = client([e.url]);
    const controller = new AbortController();
    const leaving = sendWithAdapter(c, controller.signal);
    const staying = sendWithAdapter(c);
    controller.abort();
    await expect(leaving).rejects.toBeInstanceOf(RequestAbortedError);
    await staying;
    expect(e.loads.get(adapter.name)).toBe(1);
  });

  it('unloads an adapter from every replica and loads it again on next use', async () => {
    const [a, b] = [await engine(), await engine()];
    const c = client([a.url, b.url]);
    await Promise.all([sendWithAdapter(c), sendWithAdapter(c)]);
    await c.adapters.unload(c.replicas, adapter.name);
    expect([a.adapters.has(adapter.name), b.adapters.has(adapter.name)]).toEqual([false, false]);
    await sendWithAdapter(c);
    expect((a.loads.get(adapter.name) ?? 0) + (b.loads.get(adapter.name) ?? 0)).toBeGreaterThanOrEqual(2);
  });

  it('treats unloading an adapter the engine does not have as done', async () => {
    const e = await engine();
    const c = client([e.url]);
    await expect(c.adapters.unload(c.replicas, 'never-loaded')).resolves.toBeUndefined();
  });
});

describe('adapter load failures', () => {
  it('answers a load that outlasts adapter_load_ms with a 504 adapter_load_failed, not a raw error', async () => {
    const e = await engine({ loadDelayMs: 1_000 });
    const c = client([e.url], { adapterLoadMs: 100 });
    const error = await sendWithAdapter(c).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineFault);
    expect(error).toMatchObject({
      statusCode: 504,
      code: 'adapter_load_failed',
      message: `The engine did not load the weights of checkpoint ${adapter.name} within the adapter load timeout of 100 ms.`,
      detail: `replica ${e.url} of backend test-backend did not load adapter ${adapter.name} from ${adapter.path} within the adapter load timeout of 100 ms`,
    });
    expect(c.adapters.isLoaded(c.replicas[0], adapter.name)).toBe(false);
  });

  it('answers a connection dropped during the load with a 502 adapter_load_failed', async () => {
    const e = await engine();
    e.setLoadBehaviour({ kind: 'drop' }, 1);
    const c = client([e.url]);
    const error = await sendWithAdapter(c).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineFault);
    expect(error).toMatchObject({
      statusCode: 502,
      code: 'adapter_load_failed',
      message: `The engine failed while loading the weights of checkpoint ${adapter.name}: UND_ERR_SOCKET`,
      detail: `replica ${e.url} of backend test-backend failed while loading adapter ${adapter.name} from ${adapter.path}: other side closed`,
    });
    // Forgotten: the next request loads it.
    await sendWithAdapter(c);
    expect(e.loads.get(adapter.name)).toBe(1);
  });

  it('answers an engine 4xx to the load with a 502 adapter_load_failed; the engine\'s message, which names the path, is only logged', async () => {
    const e = await engine();
    e.setLoadBehaviour({ kind: 'status', status: 400, message: 'No adapter found for /ckpt/agent-001/3' }, 1);
    const error = await sendWithAdapter(client([e.url])).catch((err: unknown) => err);
    expect(error).toMatchObject({
      statusCode: 502,
      code: 'adapter_load_failed',
      message: `The engine could not load the weights of checkpoint ${adapter.name} (it answered 400); the server log has the engine's message.`,
      detail: `replica ${e.url} of backend test-backend could not load adapter ${adapter.name} from ${adapter.path} (engine answered 400): No adapter found for /ckpt/agent-001/3`,
    });
  });

  it('unloads after a load that was in flight when the unload was asked for', async () => {
    const e = await engine({ loadDelayMs: 300 });
    const c = client([e.url]);
    // The request itself may meet the engine before or after the unload: only the adapter's fate matters.
    const pending = sendWithAdapter(c).catch(() => undefined);
    await waitFor(() => e.requests.some((r) => r.path === '/v1/load_lora_adapter'));
    await c.adapters.unload(c.replicas, adapter.name);
    await pending;
    expect(e.loads.get(adapter.name)).toBe(1);
    expect(e.unloads.get(adapter.name)).toBe(1);
    expect(e.adapters.has(adapter.name)).toBe(false);
    expect(c.adapters.isLoaded(c.replicas[0], adapter.name)).toBe(false);
  });
});

describe('an adapter whose checkpoint another process deletes (AdapterSpec.exists)', () => {
  const retired = { statusCode: 404, code: 'model_not_found', param: 'model', message: `The model \`${adapter.name}\` does not exist or you do not have access to it.` };
  const sendChecked = (c: BackendClient, exists: () => Promise<boolean>) =>
    c.send({ path: '/v1/chat/completions', body: chatBody({ model: adapter.name }), adapter: { ...adapter, exists } });

  it('is not loaded once its checkpoint is gone, and is refused from then on', async () => {
    const e = await engine();
    const c = client([e.url]);
    let asked = 0;
    const error = await sendChecked(c, async () => (asked++, false)).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RetiredAdapterError);
    expect(error).toMatchObject(retired);
    await expect(sendChecked(c, async () => (asked++, true))).rejects.toBeInstanceOf(RetiredAdapterError);
    expect(asked).toBe(1);
    expect(e.requests).toEqual([]);
  });

  it('is unloaded again when its checkpoint went while it loaded', async () => {
    const e = await engine({ loadDelayMs: 100 });
    const c = client([e.url]);
    let exists = true;
    const pending = sendChecked(c, async () => exists).catch((err: unknown) => err);
    await waitFor(() => e.requests.some((r) => r.path === '/v1/load_lora_adapter'));
    exists = false;
    expect(await pending).toMatchObject(retired);
    expect([e.loads.get(adapter.name), e.unloads.get(adapter.name), e.adapters.has(adapter.name)]).toEqual([1, 1, false]);
    expect(e.chatRequests()).toEqual([]);
    expect(c.adapters.isLoaded(c.replicas[0], adapter.name)).toBe(false);
  });

  it('answers 404, not adapter_load_failed, when the engine refused it because its checkpoint (and files) went meanwhile', async () => {
    const e = await engine();
    const c = client([e.url]);
    e.setLoadBehaviour({ kind: 'status', status: 400, message: 'No adapter found for /ckpt/agent-001/3' }, 1);
    let asked = 0;
    await expect(sendChecked(c, async () => ++asked === 1)).rejects.toMatchObject(retired);
  });

  it('is not loaded back after an engine 404 once its checkpoint is gone', async () => {
    const e = await engine();
    const c = client([e.url]);
    let exists = true;
    await sendChecked(c, async () => exists);
    e.adapters.delete(adapter.name);
    exists = false;
    await expect(sendChecked(c, async () => exists)).rejects.toMatchObject(retired);
    expect(e.loads.get(adapter.name)).toBe(1);
    expect(e.chatRequests().map((r) => (r.body as { model: string }).model)).toEqual([adapter.name, adapter.name]);
  });
});
