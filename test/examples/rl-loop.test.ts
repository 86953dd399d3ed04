import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runRlLoop } from '../../examples/rl-loop.js';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, writeBackendsFile } from '../inference/gateway-helpers.js';
import { SERVER_ENV, startWorker } from '../worker/harness.js';

const BASE = 'fake/base-model';

let engine: FakeEngine;
let app: App;
let baseUrl: string;
let user: TestUser;
let workDir: string;

beforeAll(async () => {
  engine = await startFakeEngine({ models: [BASE], chunks: 6 });
  app = await createTestApp({
    ...SERVER_ENV,
    BACKENDS_FILE: writeBackendsFile([backendEntry('fake', [engine.url], { models: [BASE] })]),
    TRAINABLE_BASE_MODELS: BASE,
  });
  baseUrl = await listen(app);
  user = await createUserWithKey(app, { prefix: 'rl' });
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-loop-'));
});
afterAll(async () => {
  await app.close();
  await engine.close();
  fs.rmSync(workDir, { recursive: true, force: true });
});

describe('examples/rl-loop.ts', () => {
  it('runs rollouts, logs them, trains a step with a worker, and serves the new checkpoint by name', async () => {
    const { key: workerKey } = await createWorkerKey(app, user.username);
    const { worker, done } = startWorker(
      baseUrl,
      { user, workerKey, baseModel: BASE, dir: workDir, fixtureLog: path.join(workDir, 'fixture.log') },
      { baseModels: [BASE] },
    );
    const name = uniqueName('agent');
    try {
      const result = await runRlLoop({ baseUrl, apiKey: user.key, baseModel: BASE, project: 'loop', name, groupSize: 2, timeoutMs: 60_000, log: () => {} });

      expect(result.step).toBe(1);
      expect(result.checkpointModel).toBe(`${user.entity}/loop/${name}:step1`);
      expect(result.reply).toBe('Hello from the fake engine.');

      // The rollouts asked the engine for token ids (the model is trainable) ...
      const rollouts = engine.chatRequests().filter((r) => (r.body as { model: string }).model === BASE);
      expect(rollouts.length).toBe(6);
      for (const rollout of rollouts) expect(rollout.body).toMatchObject({ logprobs: true, return_tokens_as_token_ids: true });
      // ... and the checkpoint's adapter, written by the trainer, was loaded once and served.
      // Adapter names carry a hash of the checkpoint row after the step: one adapter was loaded, once.
      const prefix = `${user.entity}/loop/${name}:step1@`;
      const loaded = [...engine.loads].filter(([adapterName]) => adapterName.startsWith(prefix));
      expect(loaded).toEqual([[expect.stringMatching(/@[0-9a-f]{12}$/), 1]]);
      const adapter = loaded[0][0];
      expect(fs.existsSync(engine.adapters.get(adapter)!)).toBe(true);
      const last = engine.chatRequests().at(-1)!;
      expect((last.body as { model: string }).model).toBe(adapter);
    } finally {
      worker.drain();
      await done;
    }
  });
});
