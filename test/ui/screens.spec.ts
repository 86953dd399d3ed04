import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { createUserWithKey, createWorkerKey, type TestUser } from '../helpers/app.js';
import { backendEntry, writeBackendsFile } from '../inference/gateway-helpers.js';
import { call, ScriptedWorker } from '../training/fixtures.js';
import { openPage, screenshot, signInContext, startUi, type UiServer, type WatchedPage } from './harness.js';
import { insertMetricRows, insertUsageRows, publishDataset, queueJob, seedTrainedModel, upsertCalls, WHOLE_FLOAT_ONE, type SeededCall } from './seed.js';

/**
 * Every screen of the web UI on data seeded through the real APIs, checked against what the API returns.
 * Each test fails on any page error, console error, CSP violation or off-origin request.
 */

const STEPS = 8;
let server: UiServer;
let engine: FakeEngine;
let user: TestUser;
let admin: TestUser;
let project: string;
let model: { id: string; name: string; entity: string; project: string };
let worker: ScriptedWorker;

beforeAll(async () => {
  engine = await startFakeEngine({ models: ['fake/base-model', 'fake/other-model'] });
  server = await startUi({
    BACKENDS_FILE: writeBackendsFile([backendEntry('fake', [engine.url], { models: ['fake/base-model', 'fake/other-model'] })]),
    USAGE_FLUSH_INTERVAL_MS: '50',
  });
  user = await createUserWithKey(server.app, { prefix: 'alice' });
  admin = await createUserWithKey(server.app, { prefix: 'root', isAdmin: true });
  project = `${user.entity}/rl`;
  const seeded = await seedTrainedModel(server.app, user, { project: 'rl', name: 'agent-001', steps: STEPS });
  model = seeded.model;
  worker = seeded.worker;
  await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'agent-002', base_model: 'other-base' });
  await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'sandbox', name: 'scratch', base_model: 'other-base' });
  const other = await createUserWithKey(server.app, { prefix: 'mallory' });
  await call(server.app, other.headers, 'POST', '/v1/preview/models', { project: 'secret', name: 'hidden', base_model: 'b' });
}, 180_000);
afterAll(async () => {
  await server?.close();
  await engine?.close();
});

async function signedIn(who: TestUser = user): Promise<WatchedPage> {
  const w = await openPage(server);
  await signInContext(w.context, server.url, who.key);
  return w;
}

describe('project picker and models', () => {
  it('lists exactly the projects the key reaches, and a project lists its models', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/`);
    const rows = w.page.locator('main table tbody tr');
    await rows.first().waitFor();
    expect(await rows.locator('td:first-child').allTextContents()).toEqual([`${user.entity}/rl`, `${user.entity}/sandbox`]);
    await screenshot(w.page, 'projects');
    await w.page.getByRole('link', { name: `${user.entity}/rl` }).click();
    await w.page.getByRole('heading', { name: 'Models' }).waitFor();
    const models = w.page.getByRole('table', { name: 'Models' }).locator('tbody tr');
    await models.first().waitFor();
    expect(await models.locator('td:first-child').allTextContents()).toEqual(['agent-001', 'agent-002']);
    await screenshot(w.page, 'models');
    await w.page.getByRole('link', { name: 'agent-001' }).click();
    await w.page.getByRole('heading', { name: 'agent-001' }).waitFor();
    expect(new URL(w.page.url()).pathname).toBe(`/ui/models/${model.id}`);
    w.expectClean();
    await w.context.close();
  });
});

describe('model page', () => {
  it('draws reward per split with its band, smoothing and log scale, from the logged metrics', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const chart = w.page.locator('[data-chart="Reward"]');
    await chart.locator('canvas').waitFor();
    expect(await chart.getAttribute('data-points')).toBe(String(STEPS));
    const legend = await chart.locator('.u-legend .u-label').allTextContents();
    expect(legend).toContain('train/reward');
    expect(legend).toContain('val/reward');
    expect(legend.some((l) => l.includes('mean within-group σ'))).toBe(true);
    const painted = await chart.locator('canvas').evaluate((c: HTMLCanvasElement) => {
      const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
      return n;
    });
    expect(painted).toBeGreaterThan(0);
    // Hovering the last step shows the logged value the API holds (uPlot's legend, three decimals).
    const metrics = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/metrics?split=train`);
    const last = metrics.body.data.filter((r: any) => r.step === STEPS - 1).at(-1).metrics['train/reward'];
    const over = (await chart.locator('.u-over').boundingBox())!;
    await w.page.mouse.move(over.x + over.width - 1, over.y + over.height / 2);
    const values = chart.locator('.u-legend .u-series');
    await w.page.waitForFunction(
      (step) => document.querySelector('[data-chart="Reward"] .u-legend .u-series .u-value')?.textContent === String(step),
      STEPS - 1,
    );
    const trainRow = values.filter({ has: w.page.locator('.u-label', { hasText: /^train\/reward$/ }) });
    expect(Number(await trainRow.locator('.u-value').textContent())).toBeCloseTo(last, 3);
    // Smoothing adds a smoothed line and keeps the raw one.
    await w.page.locator('input[name="smoothing"]').fill('0.6');
    await w.page.waitForFunction(() => [...document.querySelectorAll('[data-chart="Reward"] .u-legend .u-label')].some((e) => e.textContent === 'train/reward (smoothed)'));
    const smoothedLegend = await chart.locator('.u-legend .u-label').allTextContents();
    expect(smoothedLegend).toContain('train/reward (raw)');
    await w.page.getByLabel('log scale').check();
    await w.page.waitForFunction(() => document.querySelector('[data-chart="Reward"]')?.getAttribute('data-scale') !== 'linear');
    await w.page.getByLabel('log scale').uncheck();
    await w.page.locator('input[name="smoothing"]').fill('0');
    await chart.locator('canvas').waitFor();
    await screenshot(w.page, 'model');
    w.expectClean();
    await w.context.close();
  });

  it('draws the reference lines the URL names across the reward chart, and names what is not a number', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const chart = w.page.locator('[data-chart="Reward"]');
    await chart.locator('canvas').waitFor();
    const field = w.page.getByLabel('Reference lines');
    await field.fill('0.85, 1');
    await field.press('Enter');
    await w.page.waitForFunction(() => [...document.querySelectorAll('[data-chart="Reward"] .u-legend .u-label')].some((e) => e.textContent === 'reference 1'));
    expect((await chart.locator('.u-legend .u-label').allTextContents()).filter((l) => l.startsWith('reference'))).toEqual(['reference 0.85', 'reference 1']);
    expect(new URL(w.page.url()).searchParams.get('ref')).toBe('0.85, 1');
    // The y axis reaches the highest line even where every reward is below it.
    expect(Number(await chart.getAttribute('data-y-max'))).toBeGreaterThanOrEqual(1);
    // Hovering any step shows each line's value.
    const over = (await chart.locator('.u-over').boundingBox())!;
    await w.page.mouse.move(over.x + 2, over.y + over.height / 2);
    const row = chart.locator('.u-legend .u-series').filter({ has: w.page.locator('.u-label', { hasText: /^reference 0\.85$/ }) });
    await w.page.waitForFunction(() => document.querySelector('[data-chart="Reward"] .u-legend .u-series .u-value')?.textContent === '0');
    expect(await row.locator('.u-value').textContent()).toBe('0.85');

    await w.page.reload();
    await chart.locator('canvas').waitFor();
    expect(await w.page.getByLabel('Reference lines').inputValue()).toBe('0.85, 1');
    expect((await chart.locator('.u-legend .u-label').allTextContents()).filter((l) => l.startsWith('reference'))).toEqual(['reference 0.85', 'reference 1']);

    await field.fill('0.5, best, 1e400');
    await field.press('Enter');
    await w.page.getByText('Reference lines take numbers separated by commas: "best", "1e400" are not.').waitFor();
    expect((await chart.locator('.u-legend .u-label').allTextContents()).filter((l) => l.startsWith('reference'))).toEqual(['reference 0.5']);
    w.expectClean();
    await w.context.close();
  });

  it("draws the metrics ART logged to the model's W&B run, one chart per numeric key, and nothing for a model without a run", async () => {
    const bucket = await call(server.app, user.headers, 'POST', '/graphql', {
      query: 'mutation($name: String, $project: String, $entity: String) { upsertBucket(input: {name: $name, modelName: $project, entityName: $entity}) { inserted } }',
      variables: { name: model.name, project: model.project, entity: model.entity },
    });
    expect(bucket.body).toEqual({ data: { upsertBucket: { inserted: true } } });
    // What wandb's run.log sends for ART's model.log: one history line per step, W&B's own keys beside the metrics.
    const lines = [0, 1, 2, 3, 4].map((step) =>
      JSON.stringify({ _step: step, _runtime: step * 2.5, 'train/reward': 0.2 + 0.15 * step, 'loss/train': 1 / (step + 1), 'train/policy': 'cispo' }),
    );
    const streamed = await call(server.app, user.headers, 'POST', `/files/${model.entity}/${model.project}/${model.name}/file_stream`, {
      files: { 'wandb-history.jsonl': { offset: 0, content: lines } },
    });
    expect(streamed.status).toBe(200);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const section = w.page.getByRole('region', { name: 'W&B run' });
    await section.locator('[data-chart="train/reward"] canvas').waitFor();
    expect(await section.locator('[data-chart]').evaluateAll((charts) => charts.map((c) => [c.getAttribute('data-chart'), c.getAttribute('data-points')]))).toEqual([
      ['loss/train', '5'],
      ['train/reward', '5'],
    ]);
    expect(await section.locator('h2').textContent()).toBe(`W&B run ${model.name}`);
    expect(await section.locator('p.muted').first().textContent()).toContain('running · 5 history rows');
    await section.scrollIntoViewIfNeeded();
    await screenshot(w.page, 'model-wandb');
    const bare = (await call(server.app, user.headers, 'GET', `/v1/preview/models?project=rl&limit=100`)).body.data.find((m: any) => m.name === 'agent-002');
    await w.page.goto(`${server.url}/ui/models/${bare.id}`);
    await w.page.getByRole('heading', { name: 'agent-002' }).waitFor();
    await w.page.waitForLoadState('networkidle');
    expect(await w.page.getByRole('region', { name: 'W&B run' }).count()).toBe(0);
    w.expectClean();
    await w.context.close();
  });

  it('lists the checkpoints the API holds newest first, marks the best, copies the inference name and deletes one', async () => {
    const api = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints?limit=100&order=desc`);
    const steps: string[] = api.body.data.map((c: any) => String(c.step));
    const oldest = steps.at(-1)!;
    const w = await signedIn();
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tbody tr').first().waitFor();
    expect(await table.locator('tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-step')))).toEqual(steps);
    await w.page.getByText(`All ${steps.length}.`).waitFor();
    // Best by loss/train (lowest): the last step, whose loss is smallest.
    await w.page.locator('select[name="best-metric"]').selectOption('loss/train');
    await w.page.locator('[data-best]').getByText(`(lowest): step ${steps[0]}`, { exact: false }).waitFor();
    expect(await table.locator('tr.best').getAttribute('data-step')).toBe(steps[0]);
    const row = table.locator(`tr[data-step="${oldest}"]`);
    await row.getByRole('button', { name: 'Copy' }).click();
    await w.page.locator('[data-copied] code').getByText(`wandb-artifact:///${model.entity}/${model.project}/${model.name}:step${oldest}`).waitFor();
    await row.getByRole('button', { name: 'Delete' }).click();
    await table.locator(`tr[data-step="${oldest}"]`).waitFor({ state: 'detached' });
    const after = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints?limit=100&order=desc`);
    expect(after.body.data.map((c: any) => String(c.step))).toEqual(steps.slice(0, -1));
    w.expectClean();
    await w.context.close();
  });

  it('shows pinned, best and expiry, pins a checkpoint, links its download, and edits and applies the retention policy', async () => {
    const before = (await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints?limit=100`)).body.data.map((c: any) => c.step);
    const w = await signedIn();
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tbody tr').first().waitFor();
    const oldest = table.locator(`tr[data-step="${before[0]}"]`);
    expect(await oldest.getByRole('link', { name: 'Download' }).getAttribute('href')).toBe(`/v1/preview/models/${model.id}/checkpoints/${before[0]}/archive`);

    await oldest.getByRole('button', { name: 'Pin' }).click();
    await oldest.locator('[data-kept] .badge-pinned').waitFor();
    const pinned = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints/lifecycle?limit=100`);
    expect(pinned.body.data.filter((c: any) => c.pinned).map((c: any) => c.step)).toEqual([before[0]]);

    const form = w.page.getByRole('form', { name: 'Retention policy' });
    await form.locator('input[name="keep_latest"]').fill('2');
    await form.locator('select[name="best_metric"]').selectOption('loss/train');
    await form.locator('select[name="best_mode"]').selectOption('min');
    await form.locator('input[name="ttl_hours"]').fill('24');
    await form.getByRole('button', { name: 'Save' }).click();
    await w.page.locator('[data-retention-note]').getByText('Saved.', { exact: false }).waitFor();
    expect((await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/retention`)).body).toEqual({
      keep_latest: 2,
      keep_best: 1,
      best_metric: 'loss/train',
      best_mode: 'min',
      ttl_seconds: 86_400,
    });
    // The lowest loss is the last step: latest and best at once. Nothing expires yet, and the kept ones never.
    const last = table.locator(`tr[data-step="${before.at(-1)}"]`);
    await last.locator('[data-kept] .badge-best').getByText('best by loss/train').waitFor();
    await table.locator(`tr[data-step="${before.at(-3)}"] [data-kept]`).getByText('expires', { exact: false }).waitFor();

    await form.getByRole('button', { name: 'Apply now' }).click();
    const kept = [before[0], ...before.slice(-2)];
    await w.page.locator('[data-retention-note]').getByText(`Deleted steps ${before.filter((s: number) => !kept.includes(s)).join(', ')}.`).waitFor();
    await table.locator(`tr[data-step="${before[1]}"]`).waitFor({ state: 'detached' });
    expect(await table.locator('tbody tr').evaluateAll((rows) => rows.map((r) => Number(r.getAttribute('data-step'))))).toEqual([...kept].reverse());
    const after = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/checkpoints?limit=100`);
    expect(after.body.data.map((c: any) => c.step)).toEqual(kept);
    w.expectClean();
    await w.context.close();
  });

  it('opens the rollouts of a step from a click on the reward chart', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const over = w.page.locator('[data-chart="Reward"] .u-over');
    await over.waitFor();
    const box = (await over.boundingBox())!;
    await w.page.mouse.move(box.x + box.width - 2, box.y + box.height / 2);
    await w.page.mouse.click(box.x + box.width - 2, box.y + box.height / 2);
    await w.page.getByRole('heading', { name: /Rollouts at step/ }).waitFor();
    const query = new URL(w.page.url()).searchParams;
    expect(query.get('split')).toBe('train');
    const step = Number(query.get('step'));
    expect(step).toBe(STEPS - 1);
    const api = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/trajectories?split=train&step=${step}&limit=100`);
    const groups = w.page.locator('section.group');
    await groups.first().waitFor();
    expect(await groups.count()).toBe(api.body.data.length);
    const trajectories = api.body.data.reduce((n: number, g: any) => n + g.group.trajectories.length, 0);
    const counts = await w.page.locator('.histogram .bar').evaluateAll((bars) => bars.map((b) => Number(b.getAttribute('data-count'))));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(trajectories);
    // The group of equal rewards (0.25, 0.25) is flagged; the others are not.
    expect(await w.page.locator('[data-flat]').count()).toBe(1);
    await w.page.locator('section.group').nth(2).getByText('all rewards equal: teaches nothing').waitFor();
    expect(await w.page.locator('.bubble-assistant').first().textContent()).toContain('left');
    await screenshot(w.page, 'rollouts');
    w.expectClean();
    await w.context.close();
  });

  it('draws a 10,000-point reward chart (time logged, not asserted)', async () => {
    const big = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'long-run', base_model: 'other-base' });
    await insertMetricRows(server.app, big.body.id, 10_000);
    const w = await signedIn();
    const started = Date.now();
    await w.page.goto(`${server.url}/ui/models/${big.body.id}`);
    const chart = w.page.locator('[data-chart="Reward"]');
    await chart.locator('canvas').waitFor();
    await w.page.waitForFunction(() => document.querySelector('[data-chart="Reward"]')?.hasAttribute('data-render-ms'));
    const ready = Date.now() - started;
    expect(await chart.getAttribute('data-points')).toBe('10000');
    console.log(`10,000-point reward chart: on screen ${ready} ms after navigation; ${await chart.getAttribute('data-render-ms')} ms from its data to the painted frame`);
    w.expectClean();
    await w.context.close();
  });
});

describe('job page', () => {
  it('shows events and gradient-step charts as they arrive, without a reload, until the job ends', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const w = await signedIn();
    let navigations = 0;
    w.page.on('framenavigated', () => navigations++);
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    await w.page.locator('.badge', { hasText: 'QUEUED' }).waitFor();
    const claimed = await queued.claim();
    await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 3 } }]);
    await w.page.locator('.badge', { hasText: 'RUNNING' }).waitFor();
    for (let i = 1; i <= 3; i++) {
      await worker.events(claimed, [{ type: 'gradient_step', data: { loss: 1 / i, grad_norm: 0.3 * i, learning_rate: 5e-6 } }]);
    }
    await w.page.locator('tr[data-type="gradient_step"]').nth(2).waitFor();
    await w.page.locator('[data-chart="loss"] canvas').waitFor();
    expect(await w.page.locator('[data-chart="loss"]').getAttribute('data-points')).toBe('3');
    await worker.complete(claimed, { 'loss/train': 0.1 });
    await w.page.locator('.badge', { hasText: 'COMPLETED' }).waitFor();
    await w.page.locator('tr[data-type="training_ended"]').waitFor();
    expect(navigations).toBe(1);
    await screenshot(w.page, 'job');
    w.expectClean();
    await w.context.close();
  });

  it('cancels a queued job', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    await w.page.getByRole('button', { name: 'Cancel job' }).click();
    await w.page.locator('h1 .badge', { hasText: 'CANCELED' }).waitFor();
    const job = await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs/${queued.jobId}`);
    expect(job.body.status).toBe('CANCELED');
    w.expectClean();
    await w.context.close();
  });
});

describe('traces', () => {
  const t0 = new Date('2026-11-20T10:00:00Z');
  const at = (ms: number) => new Date(t0.getTime() + ms);
  const script = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';

  beforeAll(async () => {
    const roots: SeededCall[] = Array.from({ length: 30 }, (_, i) => ({
      id: `root-${String(i).padStart(2, '0')}`,
      trace_id: `trace-${i}`,
      op_name: i % 3 === 0 ? 'eval.score' : 'agent.run',
      startedAt: at(i * 1000),
      latencyMs: 100 + i,
      exception: i === 7 ? 'ValueError: bad move' : undefined,
      summary: { usage: { 'gpt-x': { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, requests: 1 } } },
    }));
    const tree: SeededCall[] = [
      { id: 'tree-root', trace_id: 'trace-tree', op_name: 'agent.episode', startedAt: at(100_000), latencyMs: 900 },
      {
        id: 'tree-chat',
        trace_id: 'trace-tree',
        parent_id: 'tree-root',
        op_name: 'openai.chat.completions.create',
        startedAt: at(100_010),
        inputs: { model: 'gpt-x', messages: [{ role: 'system', content: 'You play 2048.' }, { role: 'user', content: script }] },
        output: { choices: [{ index: 0, message: { role: 'assistant', content: 'I move left.' }, finish_reason: 'stop' }] },
      },
      { id: 'tree-tool', trace_id: 'trace-tree', parent_id: 'tree-root', op_name: 'tool.move', startedAt: at(100_200), inputs: { direction: 'left' }, output: { board: [[2, 0], [0, 0]] } },
      { id: 'tree-leaf', trace_id: 'trace-tree', parent_id: 'tree-tool', op_name: 'game.apply', startedAt: at(100_210), output: 'ok' },
    ];
    const large: SeededCall[] = [{ id: 'big-0', trace_id: 'trace-big', op_name: 'big.root', startedAt: at(200_000) }];
    for (let i = 1; i < 2000; i++) {
      large.push({ id: `big-${i}`, trace_id: 'trace-big', parent_id: i < 50 ? 'big-0' : `big-${i % 49 + 1}`, op_name: `step.${i % 7}`, startedAt: at(200_000 + i) });
    }
    await upsertCalls(server.app, user, project, [...roots, ...tree, ...large]);
  }, 120_000);

  it('pages root calls, filters by op and status, sorts, and keeps all of it in the URL across a reload', async () => {
    const w = await signedIn();
    const bodies: any[] = [];
    w.page.on('request', (r) => {
      if (r.url().endsWith('/traces/calls/query')) bodies.push(r.postDataJSON());
    });
    await w.page.goto(`${server.url}/ui/p/${project}/traces`);
    const rows = w.page.getByRole('table', { name: 'Traces' }).locator('tbody tr');
    await rows.first().waitFor();
    expect(await rows.count()).toBe(25);
    await w.page.getByText('32 traces').waitFor();
    await screenshot(w.page, 'traces');
    expect(bodies[0].columns).not.toContain('inputs');
    expect(bodies[0].columns).not.toContain('output');
    await w.page.getByRole('button', { name: 'Next' }).click();
    await w.page.getByText('Page 2 of 2').waitFor();
    await w.page.waitForFunction(() => document.querySelectorAll('table[aria-label="Traces"] tbody tr').length === 7);
    await w.page.locator('select[name="status"]').selectOption('error');
    await w.page.getByText('1 traces').waitFor();
    await w.page.waitForFunction(() => document.querySelectorAll('table[aria-label="Traces"] tbody tr').length === 1);
    expect(await rows.first().locator('.badge').textContent()).toBe('error');
    await w.page.locator('select[name="status"]').selectOption('');
    await w.page.locator('input[name="op"]').fill('eval.score');
    await w.page.locator('input[name="op"]').press('Enter');
    await w.page.getByText('10 traces').waitFor();
    await w.page.getByRole('button', { name: 'Latency' }).click();
    await w.page.waitForFunction(() => new URLSearchParams(location.search).get('sort') === 'latency');
    const before = await rows.locator('td:first-child').allTextContents();
    const url = w.page.url();
    await w.page.reload();
    await w.page.getByText('10 traces').waitFor();
    expect(w.page.url()).toBe(url);
    expect(await w.page.locator('input[name="op"]').inputValue()).toBe('eval.score');
    expect(await rows.locator('td:first-child').allTextContents()).toEqual(before);
    w.expectClean();
    await w.context.close();
  });

  it('keeps what is typed in a filter while the page re-renders from a load that finishes meanwhile', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces`);
    await w.page.getByText('32 traces').waitFor();
    // Hold the next counts until the op has been typed, so that their answer re-renders the page under it.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    await w.page.route('**/traces/calls/query_stats', async (route) => {
      await held;
      await route.continue();
    });
    await w.page.locator('select[name="status"]').selectOption('error');
    await w.page.locator('input[name="op"]').fill('eval.score');
    release();
    await w.page.getByText('1 traces').waitFor();
    expect(await w.page.locator('input[name="op"]').inputValue()).toBe('eval.score');
    await w.page.unroute('**/traces/calls/query_stats');
    await w.page.locator('input[name="op"]').press('Enter');
    await w.page.waitForFunction(() => new URLSearchParams(location.search).get('op') === 'eval.score');
    expect(new URL(w.page.url()).searchParams.get('status')).toBe('error');
    w.expectClean();
    await w.context.close();
  });

  it('shows the call tree, a call\'s messages as bubbles, a script payload as text, and takes feedback', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces/trace-tree?call=tree-chat`);
    const items = w.page.getByRole('treeitem');
    await items.first().waitFor();
    expect(await items.evaluateAll((rows) => rows.map((r) => [r.getAttribute('data-call'), r.getAttribute('aria-level')]))).toEqual([
      ['tree-root', '1'],
      ['tree-chat', '2'],
      ['tree-tool', '2'],
      ['tree-leaf', '3'],
    ]);
    const detail = w.page.getByRole('region', { name: 'Call detail' });
    await detail.locator('.bubble-user').waitFor();
    expect(await detail.locator('.bubble-user pre').textContent()).toBe(script);
    expect(await detail.locator('.bubble-assistant pre').textContent()).toBe('I move left.');
    expect(await w.page.evaluate('window.__pwned')).toBeUndefined();
    expect(await detail.locator('img').count()).toBe(0);
    await detail.locator('input[name="note"]').fill('left was right');
    await detail.getByRole('button', { name: 'Add note' }).click();
    await detail.locator('.feedback li', { hasText: 'left was right' }).waitFor();
    await screenshot(w.page, 'trace');
    await items.filter({ hasText: 'tool.move' }).getByRole('button', { name: 'tool.move' }).click();
    await detail.getByText('"direction": "left"').waitFor();
    expect(new URL(w.page.url()).searchParams.get('call')).toBe('tree-tool');
    w.expectClean();
    await w.context.close();
  });

  it('keeps a 2,000-call trace to a window of rows', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces/trace-big`);
    await w.page.getByRole('treeitem').first().waitFor();
    expect(await w.page.locator('[data-calls]').getAttribute('data-calls')).toBe('2000');
    expect(await w.page.getByRole('treeitem').count()).toBeLessThanOrEqual(150);
    await w.page.locator('.tree').evaluate((el) => {
      el.scrollTop = 26 * 1500;
    });
    await w.page.waitForFunction(() => [...document.querySelectorAll('[role=treeitem]')].some((e) => Number((e as HTMLElement).style.top.replace('px', '')) >= 26 * 1500));
    expect(await w.page.getByRole('treeitem').count()).toBeLessThanOrEqual(150);
    // Keys walk the tree past the rows first drawn: the row clicked leaves the window, the keys stay with the tree.
    await w.page.locator('.tree').evaluate((el) => {
      el.scrollTop = 0;
    });
    await w.page.locator('[data-call="big-0"] button.op').click();
    for (let i = 0; i < 60; i++) await w.page.keyboard.press('ArrowDown');
    await w.page.waitForFunction(() => (document.querySelector('[role=treeitem][aria-selected=true]') as HTMLElement | null)?.style.top === `${26 * 60}px`);
    expect(await w.page.evaluate(() => document.activeElement?.getAttribute('role'))).toBe('tree');
    const selected = await w.page.locator('[role=treeitem][aria-selected=true]').getAttribute('data-call');
    expect(new URL(w.page.url()).searchParams.get('call')).toBe(selected);
    expect(await w.page.locator('.tree').getAttribute('aria-activedescendant')).toBe(`call-${selected}`);
    w.expectClean();
    await w.context.close();
  });
});

describe('threads', () => {
  it('lists the threads by last update with their turn counts, and shows a thread\'s turns in order with what went in and out', async () => {
    const where = `${user.entity}/chats`;
    const at = (s: number) => new Date(Date.parse('2026-11-22T09:00:00Z') + s * 1000);
    const reply = (content: string) => ({ choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] });
    const turn = (thread: string, n: number, s: number, question: string, output: unknown): SeededCall[] => [
      {
        id: `${thread}-t${n}`, trace_id: `${thread}-trace-${n}`, op_name: 'agent.respond', thread_id: thread, turn_id: `${thread}-t${n}`, startedAt: at(s), latencyMs: 200 * n,
        inputs: { messages: [{ role: 'user', content: question }] },
        output,
      },
      // A call inside the turn: same thread and turn, not a turn of its own.
      { id: `${thread}-t${n}-tool`, trace_id: `${thread}-trace-${n}`, parent_id: `${thread}-t${n}`, op_name: 'tool.search', thread_id: thread, turn_id: `${thread}-t${n}`, startedAt: at(s + 0.05), output: 'found' },
    ];
    await upsertCalls(server.app, user, where, [
      ...turn('support-1', 1, 0, 'Where is my order?', reply('It ships today.')),
      ...turn('support-2', 1, 10, 'Can I return shoes?', reply('Yes, within 30 days.')),
      ...turn('support-1', 2, 60, 'Thanks! And the invoice?', reply('Sent to your email.')),
      ...turn('support-1', 3, 120, 'Got it.', { not: 'a chat answer' }),
    ]);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${where}/threads`);
    const list = w.page.getByRole('table', { name: 'Threads' });
    await list.waitFor();
    const rows = await list.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));
    expect(rows.map((r) => r.slice(0, 2))).toEqual([
      ['support-1', '3'],
      ['support-2', '1'],
    ]);
    expect(rows[0].slice(2, 4)).toEqual(['2026-11-22 09:00:00', '2026-11-22 09:02:00']);
    await screenshot(w.page, 'threads');

    await list.getByRole('link', { name: 'support-1' }).click();
    await w.page.getByRole('heading', { name: 'Thread support-1' }).waitFor();
    await w.page.getByText('3 turns').waitFor();
    const turns = w.page.locator('section.turn');
    expect(await turns.locator('h2').allTextContents()).toEqual(['Turn 1: agent.respond success', 'Turn 2: agent.respond success', 'Turn 3: agent.respond success']);
    expect(await turns.nth(1).locator('.bubble pre').allTextContents()).toEqual(['Thanks! And the invoice?', 'Sent to your email.']);
    expect(JSON.parse((await turns.nth(2).locator('pre.json').textContent())!)).toEqual({ not: 'a chat answer' });
    await screenshot(w.page, 'thread');
    await turns.nth(0).getByRole('link', { name: 'agent.respond' }).click();
    await w.page.waitForURL(/\/traces\/support-1-trace-1\?call=support-1-t1$/);
    w.expectClean();
    await w.context.close();
  });
});

describe('datasets and evaluations', () => {
  const rowsOf = (n: number) => Array.from({ length: n }, (_, i) => ({ question: `q${i}`, expected: `a${i}`, meta: { difficulty: i % 3 } }));

  it('lists the latest version of each dataset with its row count, and pages the rows of any version', async () => {
    const where = `${user.entity}/evals`;
    await publishDataset(server.app, user, where, 'qa', rowsOf(3));
    // The second version of qa: 30 rows, the last holding numbers as a Python client writes them.
    const rows = JSON.stringify(rowsOf(29)).slice(0, -1) + ',{"question":"q29","expected":"a29","meta":{"weight":1.0,"seed":12345678901234567890}}]';
    await publishDataset(server.app, user, where, 'qa', rows);
    await publishDataset(server.app, user, where, 'people', [{ name: 'ada' }, { name: 'bob', age: 36 }]);
    const other = await createUserWithKey(server.app, { prefix: 'eve' });
    await publishDataset(server.app, other, `${other.entity}/evals`, 'theirs', [{ secret: 1 }]);

    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${where}/datasets`);
    const list = w.page.getByRole('table', { name: 'Datasets' });
    await list.waitFor();
    const cells = await list.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].slice(0, 3).map((td) => td.textContent)));
    expect(cells).toEqual([
      ['people', 'v0', '2'],
      ['qa', 'v1', '30'],
    ]);

    await list.getByRole('link', { name: 'qa' }).click();
    await w.page.getByRole('heading', { name: 'qa' }).waitFor();
    await w.page.getByText('30 rows').waitFor();
    const table = w.page.getByRole('table', { name: 'Rows' });
    expect(await table.locator('thead th').allTextContents()).toEqual(['#', 'expected', 'meta', 'question']);
    expect(await table.locator('tbody tr').count()).toBe(25);
    expect(await table.locator('tbody tr').first().locator('td').allTextContents()).toEqual(['0', 'a0', '{"difficulty":0}', 'q0']);
    await screenshot(w.page, 'dataset');
    await w.page.getByRole('navigation', { name: 'Pages' }).getByRole('button', { name: 'Next' }).click();
    await table.locator('tbody tr').nth(5).waitFor({ state: 'detached' });
    await w.page.getByText('Page 2 of 2').waitFor();
    expect(await table.locator('tbody tr').count()).toBe(5);
    expect(await table.locator('tbody tr').last().locator('td').allTextContents()).toEqual(['29', 'a29', '{"seed":12345678901234567890,"weight":1.0}', 'q29']);

    await w.page.getByLabel('Version').selectOption('v0');
    await w.page.getByText('3 rows').waitFor();
    expect(new URL(w.page.url()).search).toBe('?version=v0');
    await table.locator('tbody tr').nth(3).waitFor({ state: 'detached' });
    expect(await table.locator('tbody tr').count()).toBe(3);
    await w.page.reload();
    await w.page.getByText('3 rows').waitFor();
    expect(await w.page.getByLabel('Version').inputValue()).toBe('v0');

    // The columns are every key of the page's rows, in alphabetical order; a row without one shows an empty cell.
    await w.page.goto(`${server.url}/ui/p/${where}/datasets/people`);
    await table.locator('tbody tr').nth(1).waitFor();
    expect(await table.locator('thead th').allTextContents()).toEqual(['#', 'age', 'name']);
    expect(await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)))).toEqual([
      ['0', '', 'ada'],
      ['1', '36', 'bob'],
    ]);

    // Another tenant's dataset is not readable through the page.
    await w.page.goto(`${server.url}/ui/p/${other.entity}/evals/datasets/theirs`);
    await w.page.getByRole('alert').waitFor();
    expect(await w.page.getByRole('table', { name: 'Rows' }).count()).toBe(0);
    w.expectClean([/status of 403/]);
    await w.context.close();
  });

  it('shows each evaluation run with its model and every number of its summary, and a run row by row', async () => {
    const where = `${user.entity}/evals-runs`;
    const at = (s: number) => new Date(Date.parse('2026-11-21T10:00:00Z') + s * 1000);
    const evaluate = `weave:///${where}/op/Evaluation.evaluate:d1`;
    // The dataset the run scored, and a ref to each of its rows, as weave names them in predict_and_score's inputs.
    const dataset = await publishDataset(server.app, user, where, 'qa', [{ question: 'a', expected: 'A' }, { question: 'b', expected: 'x' }]);
    const stored = (await call(server.app, user.headers, 'POST', '/traces/table/query', { project_id: where, digest: dataset.table })).body.rows;
    const rowRef = (i: number) => `weave:///${where}/object/qa:${dataset.digest}/attr/rows/id/${stored[i].digest}`;
    const self = `weave:///${where}/object/echo-eval:e1`;
    await upsertCalls(server.app, user, where, [
      {
        id: 'eval-a', trace_id: 'ta', op_name: evaluate, startedAt: at(0),
        inputs: { self, model: `weave:///${where}/object/Echo:m1` },
        // A whole float as a Python client sends it (1.0): the run's page reads it exactly and shows it still.
        output: { exact: { correct: { true_count: 1, true_fraction: 0.5 } }, model_latency: { mean: 0.25 }, judge: { score: WHOLE_FLOAT_ONE } },
      },
      ...[0, 1].map((i) => ({
        id: `row-${i}`, trace_id: 'ta', parent_id: 'eval-a', op_name: `weave:///${where}/op/Evaluation.predict_and_score:s1`, startedAt: at(1 + i),
        inputs: { self, model: `weave:///${where}/object/Echo:m1`, example: rowRef(i) },
        output: { output: ['A', 'B'][i], scores: { exact: { correct: i === 0 } }, model_latency: [0.021, 0.0125][i] },
      })),
      { id: 'summarize-a', trace_id: 'ta', parent_id: 'eval-a', op_name: `weave:///${where}/op/Evaluation.summarize:z1`, startedAt: at(5), inputs: { self } },
      {
        id: 'eval-b', trace_id: 'tb', op_name: evaluate, startedAt: at(60),
        inputs: { self, model: `weave:///${where}/object/Shout:m2` },
        output: { exact: { correct: { true_count: 2, true_fraction: 1 } }, judge: { passed: true }, model_latency: { mean: 0.5 } },
      },
      { id: 'not-eval', trace_id: 'tc', op_name: `weave:///${where}/op/Echo.predict:p1`, startedAt: at(30), output: 'A' },
    ]);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${where}/evaluations`);
    const table = w.page.getByRole('table', { name: 'Evaluations' });
    await table.waitFor();
    expect(await table.locator('thead th').allTextContents()).toEqual([
      'Evaluation', 'Model', 'Status', 'Started',
      'exact.correct.true_count', 'exact.correct.true_fraction', 'judge.passed', 'model_latency.mean', 'judge.score',
    ]);
    const cells = (rows: typeof table) => rows.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));
    expect(await cells(table)).toEqual([
      ['echo-eval', 'Shout', 'success', '2026-11-21 10:01:00', '2', '1', 'true', '0.5000', '—'],
      ['echo-eval', 'Echo', 'success', '2026-11-21 10:00:00', '1', '0.5000', '—', '0.2500', '1'],
    ]);
    await screenshot(w.page, 'evaluations');

    // The Echo run, row by row: the dataset row (expanded from its ref), the output, the scores, the latency.
    await table.getByRole('link').nth(1).click();
    await w.page.waitForURL(/\/evaluations\/eval-a$/);
    await w.page.getByRole('heading', { name: 'echo-eval' }).waitFor();
    const summary = w.page.getByRole('table', { name: 'Summary' });
    expect(await summary.locator('tr').evaluateAll((trs) => trs.map((tr) => [tr.querySelector('th')!.textContent, tr.querySelector('td')!.textContent]))).toEqual([
      ['exact.correct.true_count', '1'],
      ['exact.correct.true_fraction', '0.5000'],
      ['judge.score', '1'],
      ['model_latency.mean', '0.2500'],
    ]);
    const rows = w.page.getByRole('table', { name: 'Rows' });
    await rows.locator('tbody tr').nth(1).waitFor();
    expect(await rows.locator('thead th').allTextContents()).toEqual(['#', 'expected', 'question', 'output', 'exact.correct', 'latency']);
    expect(await cells(rows)).toEqual([
      ['1', 'A', 'a', 'A', 'true', '21 ms'],
      ['2', 'x', 'b', 'B', 'false', '12.5 ms'],
    ]);
    await w.page.getByRole('heading', { name: 'Rows (2)' }).waitFor();
    await screenshot(w.page, 'evaluation');
    await rows.getByRole('link', { name: '2' }).click();
    await w.page.waitForURL(/\/traces\/ta\?call=row-1$/);
    w.expectClean();
    await w.context.close();
  });
});

describe('usage', () => {
  it('shows usage by model with totals equal to GET /v1/usage', async () => {
    for (const [modelName, n] of [['fake/base-model', 3], ['fake/other-model', 2]] as const) {
      for (let i = 0; i < n; i++) {
        const response = await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { ...user.headers, 'content-type': 'application/json', 'compat-project': project },
          body: JSON.stringify({ model: modelName, messages: [{ role: 'user', content: 'hi' }] }),
        });
        expect(response.status).toBe(200);
      }
    }
    let totals: any;
    for (let i = 0; i < 100; i++) {
      totals = (await call(server.app, user.headers, 'GET', `/v1/usage?project=${project}`)).body.data[0];
      if (totals?.requests === 5) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/usage`);
    const table = w.page.getByRole('table', { name: 'Usage by model' });
    await table.locator('tr[data-total]').waitFor();
    expect(await table.locator('tbody td:first-child').allTextContents()).toEqual(['fake/base-model', 'fake/other-model']);
    const cells = await table.locator('tr[data-total] td').allTextContents();
    expect(cells.map(Number)).toEqual([totals.requests, totals.errors, totals.prompt_tokens, totals.completion_tokens, totals.cached_tokens, totals.total_tokens]);
    expect(await w.page.locator('.histogram .bar').count()).toBe(1);
    await screenshot(w.page, 'usage');
    w.expectClean();
    await w.context.close();
  });

  it('charts usage per UTC day and narrows it to the days the from and to fields name, as GET /v1/usage does', async () => {
    const where = `${user.entity}/usage-days`;
    await insertUsageRows(server.app, user, where, [
      { at: '2026-11-20T08:00:00Z', model: 'm-a', prompt: 10, completion: 5 },
      { at: '2026-11-21T23:59:59Z', model: 'm-a', prompt: 20, completion: 10 },
      { at: '2026-11-21T00:00:00Z', model: 'm-b', prompt: 1, completion: 1, error: true },
      { at: '2026-11-23T12:00:00Z', model: 'm-b', prompt: 40, completion: 20 },
    ]);
    const w = await signedIn();
    const bars = async () => w.page.locator('.histogram .bar').evaluateAll((els) => els.map((e) => e.getAttribute('title')));
    const totalsRow = async () => (await w.page.getByRole('table', { name: 'Usage by model' }).locator('tr[data-total] td').allTextContents()).map(Number);
    const api = async (query: string) => {
      const t = (await call(server.app, user.headers, 'GET', `/v1/usage?project=${where}${query}`)).body.data[0];
      return [t.requests, t.errors, t.prompt_tokens, t.completion_tokens, t.cached_tokens, t.total_tokens];
    };

    await w.page.goto(`${server.url}/ui/p/${where}/usage`);
    await w.page.locator('tr[data-total]').waitFor();
    expect(await bars()).toEqual(['2026-11-20: 15 tokens', '2026-11-21: 32 tokens', '2026-11-23: 60 tokens']);
    expect(await totalsRow()).toEqual(await api(''));

    await w.page.locator('input[name="from"]').fill('2026-11-21');
    await w.page.waitForFunction(() => document.querySelectorAll('.histogram .bar').length === 2);
    expect(await bars()).toEqual(['2026-11-21: 32 tokens', '2026-11-23: 60 tokens']);
    await w.page.locator('input[name="to"]').fill('2026-11-23');
    await w.page.waitForFunction(() => document.querySelectorAll('.histogram .bar').length === 1);
    expect(await bars()).toEqual(['2026-11-21: 32 tokens']);
    await w.page.waitForFunction(() => document.querySelector('tr[data-total] td')?.textContent === '2');
    expect(await totalsRow()).toEqual(await api('&from=2026-11-21&to=2026-11-23'));
    expect(new URL(w.page.url()).search).toBe('?from=2026-11-21&to=2026-11-23');
    w.expectClean();
    await w.context.close();
  });
});

describe('admin', () => {
  it('is refused to a non-admin session', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/admin`);
    await w.page.getByText('This page needs an admin key.').waitFor();
    expect(await w.page.getByRole('link', { name: 'Admin' }).count()).toBe(0);
    w.expectClean();
    await w.context.close();
  });

  it('shows the system check and recent workers with their resident trainers, creates a key shown once, and revokes it', async () => {
    const residentWorker = await ScriptedWorker.create(server.app, user, ['other/base']);
    const residentTrainers = [
      { base_model: 'fake/base-model', model_id: model.id },
      { base_model: 'other/base', model_id: null },
    ];
    expect(await residentWorker.claim(0, { resident_trainers: residentTrainers })).toBeUndefined();
    // Another tenant's worker under the same worker id: its own row, named by its key's owner.
    const otherUser = await createUserWithKey(server.app);
    const namesake = new ScriptedWorker(server.app, (await createWorkerKey(server.app, otherUser.username)).headers, ['none'], residentWorker.workerId);
    expect(await namesake.claim(0)).toBeUndefined();
    const w = await signedIn(admin);
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/admin`);
    const checks = w.page.getByRole('table', { name: 'System check' });
    await checks.locator('tr').first().waitFor();
    expect(await checks.locator('td:first-child').allTextContents()).toEqual(expect.arrayContaining(['api', 'database']));
    // This server's database is in memory: the backups section says why there are none.
    await w.page.getByText("This server's embedded database is in memory: there are no files to back up.").waitFor();
    expect(await w.page.getByRole('button', { name: 'Back up now' }).count()).toBe(0);
    await w.page.getByText(worker.workerId).waitFor();
    const residents = w.page.getByRole('list', { name: `Resident trainers of ${residentWorker.workerId}` });
    await residents.waitFor();
    expect((await residents.locator('li').allTextContents()).map((t) => t.replace(/\s+/g, ' ').trim())).toEqual([
      `resident trainer: fake/base-model holding model ${model.id}`,
      'resident trainer: other/base no model held',
    ]);
    const namesakes = w.page.locator(`li[data-worker="${residentWorker.workerId}"]`);
    expect(await namesakes.count()).toBe(2);
    await namesakes.filter({ hasText: `of ${otherUser.username},` }).waitFor();
    await namesakes.filter({ hasText: `of ${user.username},` }).waitFor();
    await w.page.locator('input[name="key_user"]').fill(user.username);
    await w.page.locator('input[name="key_name"]').fill('from the ui');
    await w.page.getByRole('button', { name: 'Create key' }).click();
    const secret = (await w.page.locator('[data-secret]').textContent())!;
    expect(secret).toMatch(/^ty_[A-Za-z0-9]{40}$/);
    const keys = (await call(server.app, admin.headers, 'GET', `/v1/admin/keys?username=${user.username}`)).body.data;
    const created = keys.find((k: any) => k.name === 'from the ui');
    const row = w.page.locator(`tr[data-key="${created.id}"]`);
    await row.waitFor();
    expect(await row.textContent()).not.toContain(secret);
    expect(await row.locator('code').textContent()).toBe(`${created.prefix}…`);
    await screenshot(w.page, 'admin');
    await row.getByRole('button', { name: 'Revoke' }).click();
    await row.getByRole('button', { name: 'Revoke' }).waitFor({ state: 'detached' });
    const after = (await call(server.app, admin.headers, 'GET', `/v1/admin/keys?username=${user.username}`)).body.data;
    expect(after.find((k: any) => k.id === created.id).revoked_at).not.toBeNull();
    // The secret of the key just revoked is no longer on screen.
    expect(await w.page.locator('[data-secret]').count()).toBe(0);
    w.expectClean();
    await w.context.close();
  });

  it('lists the teams with their members, and a team created and a member added from the page show at once', async () => {
    const team = `crew-${Date.now().toString(36)}`;
    const w = await signedIn(admin);
    await w.page.goto(`${server.url}/ui/admin`);
    const teams = w.page.getByRole('table', { name: 'Teams' });
    await teams.waitFor();
    await w.page.locator('input[name="team"]').first().fill(team);
    await w.page.getByRole('button', { name: 'Create team' }).click();
    const row = teams.locator(`tr[data-team="${team}"]`);
    await row.waitFor();
    expect(await row.locator('td').allTextContents()).toEqual([team, 'none']);
    await w.page.locator('input[name="team"]').last().fill(team);
    await w.page.locator('input[name="member"]').fill(user.username);
    await w.page.getByRole('button', { name: 'Add member' }).click();
    await row.locator('td', { hasText: user.username }).waitFor();
    const listed = (await call(server.app, admin.headers, 'GET', '/v1/admin/teams')).body.data.find((t: { name: string }) => t.name === team);
    expect(listed.members).toEqual([{ username: user.username, role: 'member' }]);
    expect(await row.locator('td').allTextContents()).toEqual([team, user.username]);
    w.expectClean();
    await w.context.close();
  });

  it('brings the outcome of a form far down the page into view', async () => {
    const w = await signedIn(admin);
    await w.page.setViewportSize({ width: 1280, height: 500 });
    await w.page.goto(`${server.url}/ui/admin`);
    const member = w.page.locator('input[name="member"]');
    await member.waitFor();
    await w.page.locator('input[name="team"]').last().fill('no-such-team');
    await member.fill(user.username);
    await w.page.getByRole('button', { name: 'Add member' }).click();
    const alert = w.page.getByRole('alert');
    await alert.waitFor();
    await w.page.waitForFunction(() => {
      const box = document.querySelector('[role="alert"]')!.getBoundingClientRect();
      return box.top >= 0 && box.bottom <= window.innerHeight;
    });
    w.expectClean([/status of 404/]);
    await w.context.close();
  });
});
