import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import type { ScriptedWorker } from '../training/fixtures.js';
import { openPage, signInContext, startUi, type UiServer, type WatchedPage } from './harness.js';
import { queueJob, seedTrainedModel } from './seed.js';

/**
 * The job page with a long job: its stream replays every event at once, and the page must take them in
 * batches, keep its DOM bounded and keep its three charts (new values, not new charts).
 */

const GRADIENT_STEPS = 10_000;
let server: UiServer;
let user: TestUser;
let model: { id: string };
let worker: ScriptedWorker;

beforeAll(async () => {
  server = await startUi();
  user = await createUserWithKey(server.app, { prefix: 'long' });
  const seeded = await seedTrainedModel(server.app, user, { project: 'rl', name: 'long-run', steps: 1 });
  model = seeded.model;
  worker = seeded.worker;
}, 180_000);
afterAll(() => server?.close());

/** A signed-in page that counts the canvases the app creates (uPlot makes one per chart it builds). */
async function signedIn(): Promise<WatchedPage> {
  const w = await openPage(server);
  await w.context.addInitScript(
    "(() => { const create = document.createElement.bind(document); window.__canvases = 0; document.createElement = (name, options) => { if (String(name).toLowerCase() === 'canvas') window.__canvases++; return create(name, options); }; })();",
  );
  await signInContext(w.context, server.url, user.key);
  return w;
}

const canvasesCreated = (w: WatchedPage) => w.page.evaluate(() => (window as unknown as { __canvases: number }).__canvases);

describe('a job with 10,000 gradient steps', () => {
  it('shows every event counted, 100 rows at a time newest first, and three charts built once', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const claimed = await queued.claim();
    await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: GRADIENT_STEPS } }]);
    for (let batch = 0; batch < GRADIENT_STEPS / 1000; batch++) {
      const events = Array.from({ length: 1000 }, (_, i) => {
        const step = batch * 1000 + i + 1;
        return { type: 'gradient_step', data: { loss: 1 / step, grad_norm: 0.5, learning_rate: 5e-6, gradient_step: step } };
      });
      expect((await worker.events(claimed, events)).status).toBe(200);
    }
    await worker.complete(claimed, { 'loss/train': 0.25 });
    const total = GRADIENT_STEPS + 2; // training_started, the steps, training_ended

    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    await w.page.locator(`[data-events-count="${total}"]`).waitFor({ timeout: 60_000 });
    await w.page.locator('h1 .badge', { hasText: 'COMPLETED' }).waitFor();
    await w.page.waitForFunction((n) => document.querySelector('[data-chart="loss"]')?.getAttribute('data-points') === String(n), GRADIENT_STEPS);

    const rows = w.page.getByRole('table', { name: 'Events' }).locator('tbody tr');
    expect(await rows.count()).toBe(100);
    expect(await rows.first().getAttribute('data-type')).toBe('training_ended');
    expect(await rows.first().locator('td').first().textContent()).toBe(String(total));
    expect(await rows.last().locator('td').first().textContent()).toBe(String(total - 99));
    expect(await w.page.getByText(`${total.toLocaleString('en')} events, newest first; showing 9,903–10,002.`).count()).toBe(1);
    // Three charts, each built once: their values arrived in many batches, through setData.
    expect(await w.page.locator('canvas').count()).toBe(3);
    expect(await canvasesCreated(w)).toBeLessThanOrEqual(4); // the three charts and the axis label measurer

    await w.page.getByRole('button', { name: 'Next' }).click();
    await w.page.waitForURL(/page=1$/);
    expect(await rows.count()).toBe(100);
    expect(await rows.first().locator('td').first().textContent()).toBe(String(total - 100));
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}?page=100`);
    await w.page.locator(`[data-events-count="${total}"]`).waitFor({ timeout: 60_000 });
    expect(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-type')))).toEqual(['gradient_step', 'training_started']);
    w.expectClean();
    await w.context.close();
  }, 240_000);

  it('feeds new steps of a running job into the charts it already drew', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const claimed = await queued.claim();
    const steps = (from: number, count: number) =>
      Array.from({ length: count }, (_, i) => ({ type: 'gradient_step', data: { loss: 1 / (from + i), grad_norm: 0.5, learning_rate: 5e-6 } }));
    await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 6 } }, ...steps(1, 3)]);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    const loss = w.page.locator('[data-chart="loss"]');
    await w.page.waitForFunction(() => document.querySelector('[data-chart="loss"]')?.getAttribute('data-points') === '3');
    await loss.locator('canvas').evaluate((canvas) => canvas.setAttribute('data-first', ''));
    const before = await canvasesCreated(w);
    await worker.events(claimed, steps(4, 3));
    await w.page.waitForFunction(() => document.querySelector('[data-chart="loss"]')?.getAttribute('data-points') === '6');
    expect(await loss.locator('canvas[data-first]').count()).toBe(1);
    expect(await canvasesCreated(w)).toBe(before);
    await worker.complete(claimed, {});
    await w.page.locator('h1 .badge', { hasText: 'COMPLETED' }).waitFor();
    w.expectClean();
    await w.context.close();
  });
});
