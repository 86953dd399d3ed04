import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { TRAINING_LIMITS } from '../../src/training/schemas.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, listEvents, SERVER_ENV, startWorker, waitForStatus } from './harness.js';

/**
 * training_started data past the server's bounds would have the server refuse its batch, and then every
 * later gradient_step as out of order: the worker drops what it would refuse, and posts the rest.
 */

let app: App;
let baseUrl: string;

beforeAll(async () => {
  app = await createTestApp(SERVER_ENV);
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
});

// training_started with a key over 256 characters, a value nested 300 levels deep, text PostgreSQL cannot
// store (U+0000, a lone surrogate) and more than 1,000 keys; then three steps and a checkpoint.
const TRAINER = `
  import fs from 'node:fs';
  const spec = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
  const emit = (line) => console.log(JSON.stringify(line));
  let deep = 1;
  for (let i = 0; i < 300; i++) deep = [deep];
  const many = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => ['k' + i, i]));
  emit({ type: 'training_started', data: { num_sequences: 3, note: 'kept', ['x'.repeat(300)]: 1, deep, nul: 'a\\u0000b', lone: '\\ud800', ['key\\u0000']: 1, ...many } });
  for (let step = 1; step <= 3; step++) emit({ type: 'gradient_step', data: { loss: 1 / step } });
  fs.writeFileSync(spec.output_dir + '/adapter_model.safetensors', 'weights');
  emit({ type: 'checkpoint', uri: spec.output_dir });
`;

describe('training_started data past the server bounds', () => {
  it('loses only the keys the server would refuse, and the events after it are stored', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant, {}, 3);
    const { worker, done } = startWorker(baseUrl, tenant, { command: [process.execPath, '--input-type=module', '-e', TRAINER] });
    try {
      expect(await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED'])).toMatchObject({ status: 'COMPLETED', attempt: 1 });
    } finally {
      worker.drain();
      await done;
    }
    const events = await listEvents(app, tenant, jobId);
    expect(events.map((event) => event.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended']);
    const started = events[0].data;
    expect(Object.keys(started)).toHaveLength(TRAINING_LIMITS.metrics);
    expect(started).toMatchObject({ num_sequences: 3, note: 'kept', k0: 0, k997: 997 });
    expect(Object.keys(started).filter((key) => !/^k\d+$/.test(key)).sort()).toEqual(['note', 'num_sequences']);
  });
});
