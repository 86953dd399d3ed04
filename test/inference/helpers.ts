import type { BackendConfig, BackendTimeouts } from '../../src/inference/backends/config.js';

/** A backend over the given replica URLs with short, test-friendly timeouts unless overridden. */
export function backendFor(replicas: string[], overrides: Partial<Omit<BackendConfig, 'timeouts'>> & { timeouts?: Partial<BackendTimeouts> } = {}): BackendConfig {
  const { timeouts, ...rest } = overrides;
  return {
    name: 'test-backend',
    kind: 'openai-compatible',
    replicas,
    apiKey: undefined,
    models: ['fake/base-model'],
    runtimeLora: true,
    priorityScheduling: false,
    adapterPaths: [],
    ...rest,
    timeouts: { connectMs: 1_000, firstByteMs: 5_000, idleMs: 5_000, totalMs: 10_000, adapterLoadMs: 5_000, ...timeouts },
  };
}

export const chatBody = (overrides: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi' }], ...overrides });

/** A URL on which nothing listens. */
export async function deadUrl(start: () => Promise<{ url: string; close(): Promise<void> }>): Promise<string> {
  const engine = await start();
  await engine.close();
  return engine.url;
}

export async function waitFor(check: () => boolean, timeoutMs = 2_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
