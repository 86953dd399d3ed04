import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { EXPERIMENTAL_CONFIG_25_NULLS, ScriptedWorker, sftRows, storeDataset, THREE_GENERATIONS } from './fixtures.js';

/**
 * The call sequence of ART's ServerlessBackend (reference §4), driven over HTTP on a loopback port the way
 * the client does it, against a scripted trainer worker.
 */

let app: App;
let baseUrl: string;
let user: TestUser;

beforeAll(async () => {
  app = await createTestApp();
  baseUrl = await listen(app);
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
});

/** The ART client's transport: JSON bodies (also on DELETE), Bearer key, Stainless headers it ignores. */
async function client<T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const response = await fetch(`${baseUrl}/v1${path}`, {
    method,
    headers: {
      authorization: user.headers.authorization,
      accept: 'application/json',
      'user-agent': 'Client/Python 1.99.0',
      'x-stainless-async': 'false',
      'x-stainless-retry-count': '0',
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as T };
}

/** `_get_step`: the latest checkpoint's step, 0 when there is none. */
async function getStep(modelId: string): Promise<number> {
  const page = await client('GET', `/preview/models/${modelId}/checkpoints?limit=1&order=desc`);
  expect(page.status).toBe(200);
  return page.body.data[0]?.step ?? 0;
}

/** openai's AsyncCursorPage auto-pagination: follow `after` = last item's id while has_more. */
async function* listAll(path: string, params: Record<string, string>): AsyncGenerator<any> {
  let after: string | undefined;
  for (;;) {
    const query = new URLSearchParams({ ...params, ...(after ? { after } : {}) });
    const page = await client('GET', `${path}?${query}`);
    expect(page.status).toBe(200);
    yield* page.body.data;
    if (!page.body.has_more || page.body.data.length === 0) return;
    after = page.body.data[page.body.data.length - 1].id;
  }
}

describe('the ART ServerlessBackend call sequence', () => {
  it('registers, trains an RL step that a worker carries out, sees every event and the new checkpoint, then cleans up', async () => {
    const baseModel = uniqueName('OpenPipe/Qwen3-14B-Instruct');
    const registration = { entity: null, project: 'art-2048', name: uniqueName('agent'), base_model: baseModel, return_existing: true };

    // register: ART always sends return_existing, and registers again on every run
    const created = await client('POST', '/preview/models', registration);
    expect(created.status).toBe(200);
    expect(created.body).toEqual({
      id: expect.any(String),
      entity: user.entity,
      project: 'art-2048',
      name: registration.name,
      base_model: baseModel,
      run_id: null,
      created_at: expect.any(String),
    });
    const again = await client('POST', '/preview/models', registration);
    expect(again.body.id).toBe(created.body.id);
    const modelId = created.body.id as string;

    expect(await getStep(modelId)).toBe(0);

    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    for (const expectedStep of [1, 2]) {
      const groups = THREE_GENERATIONS();
      const job = await client('POST', '/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: groups,
        experimental_config: { ...EXPERIMENTAL_CONFIG_25_NULLS, learning_rate: 5e-6 },
      });
      expect(job.status).toBe(200);
      expect(job.body).toEqual({ id: expect.any(String) });

      const training = worker.train({ gradientSteps: 3, pauseMs: 30 });
      const polled = pollEvents(job.body.id, modelId);
      const [{ claimed, inputs }, { events, stepAtEnd }] = await Promise.all([training, polled]);

      expect(claimed.job).toMatchObject({ id: job.body.id, kind: 'rl', attempt: 1, target_step: expectedStep });
      expect(claimed.job.config.experimental_config).toEqual({ ...EXPERIMENTAL_CONFIG_25_NULLS, learning_rate: 5e-6 });
      expect(inputs).toHaveLength(3);
      expect((inputs[1] as any).trajectories[0].an_unknown_key).toEqual({ kept: true });
      expect(events.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended']);
      expect(events.slice(1, 4).map((e) => e.data.gradient_step)).toEqual([1, 2, 3]);
      // the checkpoint is listed by the time the client handles training_ended
      expect(stepAtEnd).toBe(expectedStep);
    }

    // delete_checkpoints: list all (auto-paginated), keep the latest, delete the rest with a DELETE body
    const all: any[] = [];
    for await (const checkpoint of listAll(`/preview/models/${modelId}/checkpoints`, {})) all.push(checkpoint);
    expect(all.map((c) => c.step)).toEqual([1, 2]);
    const deleted = await client('DELETE', `/preview/models/${modelId}/checkpoints`, { steps: [1] });
    expect(deleted).toEqual({ status: 200, body: { deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [] } });
    expect(await getStep(modelId)).toBe(2);

    const removed = await client('DELETE', `/preview/models/${modelId}`);
    expect(removed).toEqual({ status: 200, body: { model_id: modelId, deleted_checkpoints: 1, deleted_run: true } });
    expect((await client('GET', `/preview/models/${modelId}/checkpoints`)).status).toBe(404);
  });

  it('trains an SFT step from a dataset ref, polled through the same events endpoint', async () => {
    const baseModel = uniqueName('Qwen/Qwen3-30B-A3B-Instruct-2507');
    const created = await client('POST', '/preview/models', { entity: null, project: 'sft', name: uniqueName('agent'), base_model: baseModel, return_existing: true });
    const modelId = created.body.id as string;
    const rows = sftRows(5);
    const { datasetRef } = await storeDataset(app, user, rows);

    const step = await getStep(modelId);
    const job = await client('POST', '/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: datasetRef,
      config: { learning_rate: [5e-5, 4e-5, 3e-5], metric_logging: { enabled: true, target_training_step: step + 1 } },
    });
    expect(job).toEqual({ status: 200, body: { id: expect.any(String) } });

    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const [{ claimed, inputs }, { events, stepAtEnd }] = await Promise.all([
      worker.train({ gradientSteps: 3, pauseMs: 30 }),
      pollEvents(job.body.id, modelId),
    ]);
    expect(claimed.job).toMatchObject({ kind: 'sft', target_step: 1, num_inputs: 5 });
    expect(claimed.job.config).toEqual({
      training_data_url: datasetRef,
      sft_config: { learning_rate: [5e-5, 4e-5, 3e-5], metric_logging: { enabled: true, target_training_step: 1 } },
      experimental_config: {},
    });
    expect(inputs).toEqual(rows);
    expect(events.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended']);
    expect(stepAtEnd).toBe(1);

    expect(await client('DELETE', `/preview/models/${modelId}/checkpoints`, { steps: [1, 7] })).toEqual({
      status: 200,
      body: { deleted_count: 1, not_found_steps: [7], pinned_steps: [], in_use_steps: [] },
    });
    expect((await client('DELETE', `/preview/models/${modelId}`)).body).toEqual({ model_id: modelId, deleted_checkpoints: 0, deleted_run: true });
  });
});

/**
 * The latest backend's polling loop (reference §3.9), with its quirk: the training_started branch
 * `continue`s before the cursor moves, so the next poll sees it again. Returns every distinct event in the
 * order seen, and the latest step listed at the moment training_ended was handled (ART's next call).
 */
async function pollEvents(jobId: string, modelId: string): Promise<{ events: any[]; stepAtEnd: number }> {
  const seen = new Map<string, any>();
  let after: string | undefined;
  let started = false;
  for (let polls = 0; polls < 1000; polls++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    for await (const event of listAll(`/preview/training-jobs/${jobId}/events`, after ? { after } : {})) {
      if (!seen.has(event.id)) seen.set(event.id, event);
      if (event.type === 'training_started') {
        expect(typeof event.data.num_sequences).toBe('number');
        started = true;
        continue;
      }
      if (event.type === 'gradient_step') {
        expect(started).toBe(true);
        for (const value of Object.values(event.data)) expect(typeof value).toBe('number');
      }
      if (event.type === 'training_failed') throw new Error(`Training job failed: ${event.data.error_message}`);
      if (event.type === 'training_ended') return { events: [...seen.values()], stepAtEnd: await getStep(modelId) };
      after = event.id;
    }
  }
  throw new Error('the job never ended');
}
