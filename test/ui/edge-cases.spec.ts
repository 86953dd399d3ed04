import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createModel, findEntityIds } from '../../src/training/repository.js';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { call, groupGenerationA, type ScriptedWorker } from '../training/fixtures.js';
import { openPage, signInContext, startUi, type UiServer, type WatchedPage } from './harness.js';
import { publishDataset, queueJob, seedTrainedModel, upsertCalls } from './seed.js';

/**
 * What the pages must survive: names the APIs accept but a URL must encode, malformed URLs, odd stored
 * values (null usage, NaN in W&B history), long checkpoint lists and failing requests.
 */

const STEPS = 3;
const FAILED_503 = /Failed to load resource: the server responded with a status of 503/;
let server: UiServer;
let user: TestUser;
let model: { id: string; name: string; entity: string; project: string };
let worker: ScriptedWorker;

beforeAll(async () => {
  server = await startUi();
  user = await createUserWithKey(server.app, { prefix: 'edge' });
  const seeded = await seedTrainedModel(server.app, user, { project: 'rl', name: 'agent-edge', steps: STEPS });
  model = seeded.model;
  worker = seeded.worker;
}, 180_000);
afterAll(() => server?.close());

async function signedIn(): Promise<WatchedPage> {
  const w = await openPage(server);
  await signInContext(w.context, server.url, user.key);
  return w;
}

describe('names and URLs', () => {
  it('opens the models and a model of a project whose name holds %, / and #, and its other tabs say why they hold nothing', async () => {
    // The training API took any project name before it held names to the inference name rule, so such
    // models may be stored; tracing and usage take letters, digits, '.', '_' and '-'.
    const project = '50%/a#b';
    const refused = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project, name: 'odd-name', base_model: 'b' });
    expect(refused.status).toBe(422);
    const entityId = (await findEntityIds(server.app.db, { names: [user.entity] })).get(user.entity)!;
    expect(await createModel(server.app.db, { entityId, project, name: 'odd-name', baseModel: 'b' })).toBeDefined();
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/`);
    await w.page.getByRole('link', { name: `${user.entity}/${project}`, exact: true }).click();
    await w.page.getByRole('heading', { name: 'Models' }).waitFor();
    await w.page.getByRole('table', { name: 'Models' }).getByRole('link', { name: 'odd-name' }).click();
    await w.page.getByRole('heading', { name: 'odd-name' }).waitFor();
    await w.page.getByRole('link', { name: `${user.entity}/${project}` }).click();
    await w.page.getByRole('table', { name: 'Models' }).getByRole('link', { name: 'odd-name' }).waitFor();
    expect(await w.page.locator('nav.tabs strong').textContent()).toBe(`${user.entity}/${project}`);
    for (const tab of ['Traces', 'Usage']) {
      await w.page.getByRole('link', { name: tab }).click();
      await w.page.getByRole('heading', { name: tab }).waitFor();
      expect(await w.page.locator('nav.tabs strong').textContent()).toBe(`${user.entity}/${project}`);
      await w.page.getByRole('alert').getByText(`Invalid project id "${user.entity}/${project}"`, { exact: false }).waitFor();
    }
    w.expectClean([/status of 400 \(Bad Request\)/]);
    await w.context.close();
  });

  it('shows "Not found" when history leads to a path with a malformed escape, without a page error', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/`);
    await w.page.getByRole('heading', { name: 'Projects' }).waitFor();
    // What Back or Forward does after a link with a raw "%" (the server itself answers such a URL with 400).
    for (const path of [`/ui/p/${user.entity}/50%/models`, '/ui/models/%E0%A4%A']) {
      await w.page.evaluate((to) => {
        history.pushState(null, '', to);
        dispatchEvent(new PopStateEvent('popstate'));
      }, path);
      await w.page.getByRole('heading', { name: 'Not found' }).waitFor();
      await w.page.getByRole('link', { name: 'Projects' }).click();
      await w.page.getByRole('heading', { name: 'Projects' }).waitFor();
    }
    w.expectClean();
    await w.context.close();
  });
});

describe('trace page', () => {
  it('shows an integer beyond 2^53 with all its digits and a whole float with its point, and counts a float token count', async () => {
    const project = `${user.entity}/long-integers`;
    const started = '2026-11-20T10:00:00.000Z';
    // Raw JSON text: JavaScript numbers cannot hold these literals.
    const start = { project_id: project, id: 'seeded', trace_id: 't-seeded', op_name: 'sample', started_at: started, attributes: {}, inputs: { seed: 'SEED', temperature: 'ONE' } };
    const summary = { usage: { m: { prompt_tokens: 'TOKENS', completion_tokens: 5 } } };
    const end = { project_id: project, id: 'seeded', ended_at: '2026-11-20T10:00:01.000Z', output: { ids: ['ID', 7] }, summary };
    const body = JSON.stringify({ batch: [{ mode: 'start', req: { start } }, { mode: 'end', req: { end } }] })
      .replace('"SEED"', '9223372036854775807')
      .replace('"ONE"', '1.0')
      .replace('"TOKENS"', '10.0')
      .replace('"ID"', '-18446744073709551617');
    const response = await server.app.inject({ method: 'POST', url: '/traces/call/upsert_batch', headers: { ...user.headers, 'content-type': 'application/json' }, payload: body });
    expect(response.statusCode, response.body).toBe(200);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces/t-seeded?call=seeded`);
    const detail = w.page.getByRole('region', { name: 'Call detail' });
    await detail.locator('pre.json').first().waitFor();
    const shown = await detail.locator('pre.json').allTextContents();
    expect(shown.map((text) => text.replace(/\s+/g, ''))).toEqual(['{"seed":9223372036854775807,"temperature":1.0}', '{"ids":[-18446744073709551617,7]}']);
    const facts = detail.locator('dl.facts');
    expect(await facts.locator('dt:text-is("Tokens") + dd').textContent()).toBe('15');
    // On a phone the call's detail goes below the tree, on screen.
    await w.page.setViewportSize({ width: 375, height: 800 });
    const right = await detail.evaluate((d) => d.getBoundingClientRect().right);
    expect(right).toBeLessThanOrEqual(375);
    w.expectClean();
    await w.context.close();
  });
});

describe('a phone-sized screen', () => {
  it('fits every page in 375 pixels: the page never scrolls sideways and the header spans it', async () => {
    const project = `${user.entity}/${model.project}`;
    await upsertCalls(server.app, user, project, [
      { id: 'narrow-root', trace_id: 'narrow', op_name: 'agent.narrow', startedAt: new Date('2026-11-20T10:00:00Z') },
      {
        id: 'narrow-turn', trace_id: 'narrow-t', op_name: 'agent.respond', thread_id: 'narrow-thread', turn_id: 'narrow-turn', startedAt: new Date('2026-11-20T10:01:00Z'),
        inputs: { messages: [{ role: 'user', content: 'word '.repeat(80) }] }, output: { long: 'y'.repeat(300) },
      },
    ]);
    await publishDataset(server.app, user, project, 'wide', [{ prompt: 'word '.repeat(60), answer: 'x'.repeat(150) }]);
    const job = (await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs?model_id=${model.id}&limit=1`)).body.data[0];
    const w = await signedIn();
    await w.page.setViewportSize({ width: 375, height: 800 });
    const pages: [string, string][] = [
      ['/ui/', 'Projects'],
      [`/ui/p/${user.entity}/${model.project}/models`, 'Models'],
      [`/ui/models/${model.id}`, model.name],
      [`/ui/models/${model.id}/rollouts?split=train&step=1`, 'Rollouts at step 1'],
      [`/ui/jobs/${job.id}`, `job ${job.id.slice(0, 8)}`],
      [`/ui/p/${user.entity}/${model.project}/traces`, 'Traces'],
      [`/ui/p/${user.entity}/${model.project}/traces/narrow`, 'Trace narrow'],
      [`/ui/p/${user.entity}/${model.project}/threads`, 'Threads'],
      [`/ui/p/${user.entity}/${model.project}/threads/narrow-thread`, 'Thread narrow-thread'],
      [`/ui/p/${user.entity}/${model.project}/evaluations`, 'Evaluations'],
      [`/ui/p/${user.entity}/${model.project}/evaluations/narrow-turn`, 'Rows (0)'],
      [`/ui/p/${user.entity}/${model.project}/datasets`, 'Datasets'],
      [`/ui/p/${user.entity}/${model.project}/datasets/wide`, 'wide'],
      [`/ui/p/${user.entity}/${model.project}/usage`, 'Usage'],
    ];
    for (const [path, heading] of pages) {
      await w.page.goto(`${server.url}${path}`);
      await w.page.getByRole('heading', { name: heading, exact: false }).first().waitFor();
      await w.page.waitForLoadState('networkidle');
      const widths = await w.page.evaluate(() => ({ page: document.documentElement.scrollWidth, header: document.querySelector('header.top')!.getBoundingClientRect().width }));
      expect([path, widths]).toEqual([path, { page: 375, header: 375 }]);
    }
    w.expectClean();
    await w.context.close();
  });
});

describe('trace tree', () => {
  it('moves the selection with the keys a tree takes, and keeps the error mark of a long op name in view', async () => {
    const project = `${user.entity}/tree-keys`;
    const at = (ms: number) => new Date(Date.parse('2026-11-20T10:00:00Z') + ms);
    const long = `agent.${'very_long_segment.'.repeat(20)}run`;
    await upsertCalls(server.app, user, project, [
      { id: 'root', trace_id: 'keys', op_name: long, startedAt: at(0), exception: 'ValueError: lost' },
      { id: 'a', trace_id: 'keys', parent_id: 'root', op_name: 'step.a', startedAt: at(10) },
      { id: 'b', trace_id: 'keys', parent_id: 'root', op_name: 'step.b', startedAt: at(20) },
      { id: 'c', trace_id: 'keys', parent_id: 'b', op_name: 'step.c', startedAt: at(30) },
    ]);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces/keys`);
    const tree = w.page.getByRole('tree', { name: 'Calls' });
    await tree.getByRole('treeitem').nth(3).waitFor();
    // Measured once the detail (whose heading holds the same long name) is in: it must not squeeze the tree.
    await w.page.getByRole('region', { name: 'Call detail' }).getByRole('heading', { name: long }).waitFor();
    const [markRight, treeRight, treeWidth] = await tree.evaluate((t) => [
      t.querySelector('[data-call="root"] [title="error"]')!.getBoundingClientRect().right,
      t.getBoundingClientRect().right,
      t.getBoundingClientRect().width,
    ]);
    expect(markRight).toBeLessThanOrEqual(treeRight);
    // The tree keeps its share of the page (2 of 5 parts of 1280 pixels, less the gap), not the 320-pixel floor.
    expect(treeWidth).toBeGreaterThan(400);
    expect(await tree.locator('[data-call="root"] button.op').getAttribute('title')).toBe(long);

    // The selection is the URL's call (the root when none), the one selected row and the tree's active one.
    const press = async (key: string, expected: string) => {
      if (key) await w.page.keyboard.press(key);
      await tree.locator(`[data-call="${expected}"][aria-selected="true"]`).waitFor();
      expect(await tree.locator('[aria-selected="true"]').count()).toBe(1);
      expect(new URL(w.page.url()).searchParams.get('call') ?? 'root').toBe(expected);
      expect(await tree.getAttribute('aria-activedescendant')).toBe(`call-${expected}`);
    };
    await tree.focus();
    await press('', 'root');
    for (const [key, expected] of [
      ['ArrowDown', 'a'],
      ['ArrowDown', 'b'],
      ['ArrowRight', 'c'],
      ['ArrowLeft', 'b'],
      ['ArrowUp', 'a'],
      ['End', 'c'],
      ['Home', 'root'],
      ['End', 'c'],
      ['ArrowUp', 'b'],
    ]) {
      await press(key, expected);
    }
    // Left on an open row closes it, and on a closed one steps to the parent; right opens a closed row.
    await w.page.keyboard.press('ArrowLeft');
    await tree.locator('[data-call="c"]').waitFor({ state: 'detached' });
    expect(await tree.locator('[data-call="b"]').getAttribute('aria-expanded')).toBe('false');
    await press('ArrowLeft', 'root');
    await press('End', 'b');
    await w.page.keyboard.press('ArrowRight');
    await tree.locator('[data-call="c"]').waitFor();
    await press('', 'b');
    // A click on a row selects it and leaves the keys with the tree.
    await tree.locator('[data-call="a"] button.op').click();
    await press('', 'a');
    expect(await w.page.evaluate(() => document.activeElement?.getAttribute('role'))).toBe('tree');
    await press('ArrowDown', 'b');
    w.expectClean();
    await w.context.close();
  });
});

describe('traces list', () => {
  it('sorts by the op name it shows: the short name of an op ref, a display name, a plain span name', async () => {
    const project = `${user.entity}/op-sort`;
    const startedAt = new Date('2026-11-20T10:00:00Z');
    const ref = (name: string) => `weave:///${project}/op/${name}:0123456789abcdef`;
    await upsertCalls(
      server.app,
      user,
      project,
      [
        { op_name: 'gamma.step' },
        { op_name: ref('beta') },
        { op_name: ref('omega'), display_name: 'delta' },
        { op_name: ref('alpha') },
      ].map((c, i) => ({ ...c, id: `s${i}`, trace_id: `ts${i}`, startedAt: new Date(startedAt.getTime() + i * 1000) })),
    );
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces?sort=op&dir=asc`);
    const names = w.page.getByRole('table', { name: 'Traces' }).locator('tbody tr td:first-child');
    await names.nth(3).waitFor();
    expect(await names.allTextContents()).toEqual(['alpha', 'beta', 'delta', 'gamma.step']);
    await w.page.getByRole('button', { name: 'Op ▲' }).click();
    await w.page.waitForFunction(() => document.querySelector('table[aria-label="Traces"] tbody td')?.textContent === 'gamma.step');
    expect(await names.allTextContents()).toEqual(['gamma.step', 'delta', 'beta', 'alpha']);
    w.expectClean();
    await w.context.close();
  });

  it('lists calls whose usage holds a null entry or string counts, summing only numeric counts', async () => {
    const project = `${user.entity}/odd-usage`;
    const startedAt = new Date('2026-11-20T10:00:00Z');
    await upsertCalls(server.app, user, project, [
      { id: 'null-usage', trace_id: 't-null', op_name: 'agent.null', startedAt, summary: { usage: { m: null } } },
      {
        id: 'string-usage',
        trace_id: 't-string',
        op_name: 'agent.string',
        startedAt: new Date(startedAt.getTime() + 1000),
        summary: { usage: { a: { total_tokens: '15' }, b: { total_tokens: 5 }, c: { prompt_tokens: 2, completion_tokens: '3' } } },
      },
    ]);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces`);
    const rows = w.page.getByRole('table', { name: 'Traces' }).locator('tbody tr');
    await rows.nth(1).waitFor();
    const cells = await rows.evaluateAll((trs) => trs.map((tr) => [tr.children[0].textContent, tr.children[4].textContent]));
    expect(cells).toEqual([
      ['agent.string', '7'],
      ['agent.null', '—'],
    ]);
    w.expectClean();
    await w.context.close();
  });

  it('reads a page that is not a whole number as the first, and offers the last for one past it', async () => {
    const project = `${user.entity}/paged-traces`;
    const startedAt = new Date('2026-11-20T10:00:00Z');
    await upsertCalls(server.app, user, project, [0, 1, 2].map((i) => ({ id: `p${i}`, trace_id: `tp${i}`, op_name: `agent.p${i}`, startedAt: new Date(startedAt.getTime() + i * 1000) })));
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces?page=1.5`);
    await w.page.getByRole('navigation', { name: 'Pages' }).getByText('Page 1 of 1').waitFor();
    expect(await w.page.getByRole('table', { name: 'Traces' }).locator('tbody tr').count()).toBe(3);
    await w.page.goto(`${server.url}/ui/p/${project}/traces?page=99&sort=started`);
    await w.page.getByText('There is 1 page:').waitFor();
    await w.page.getByRole('link', { name: 'go to the last' }).click();
    await w.page.getByRole('table', { name: 'Traces' }).locator('tbody tr').nth(2).waitFor();
    expect(new URL(w.page.url()).search).toBe('?sort=started');
    // Every table of the app scrolls within its own box, as the checkpoints table does (tested at 375 below).
    expect(await w.page.getByRole('table', { name: 'Traces' }).evaluate((t) => getComputedStyle(t.parentElement!).overflowX)).toBe('auto');
    w.expectClean();
    await w.context.close();
  });
});

/** A model with a W&B run of its name whose history holds these lines, as wandb-core streams them. */
async function modelWithHistory(name: string, lines: string[]): Promise<{ id: string; name: string; entity: string; project: string }> {
  const m = (await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name, base_model: 'b' })).body;
  await call(server.app, user.headers, 'POST', '/graphql', {
    query: 'mutation($name: String, $project: String, $entity: String) { upsertBucket(input: {name: $name, modelName: $project, entityName: $entity}) { inserted } }',
    variables: { name: m.name, project: m.project, entity: m.entity },
  });
  const streamed = await call(server.app, user.headers, 'POST', `/files/${m.entity}/${m.project}/${m.name}/file_stream`, { files: { 'wandb-history.jsonl': { offset: 0, content: lines } } });
  expect(streamed.status).toBe(200);
  return m;
}

describe('model page', () => {
  it("shows the policy's best metric and the reward metrics among the checkpoint columns", async () => {
    const policy = await call(server.app, user.headers, 'PUT', `/v1/preview/models/${model.id}/retention`, { best_metric: 'val/reward', keep_best: 1 });
    expect(policy.status).toBe(200);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tbody tr').first().waitFor();
    const headers = await table.locator('thead th').allTextContents();
    // Step, six metric columns (the policy's metric, then the rewards, then the others by name), Kept, name, actions.
    expect(headers.slice(1, 3)).toEqual(['val/reward', 'train/reward']);
    expect(headers).toHaveLength(10);
    await table.locator('[data-kept] .badge-best').getByText('best by val/reward').waitFor();
    await call(server.app, user.headers, 'PUT', `/v1/preview/models/${model.id}/retention`, {});
    w.expectClean();
    await w.context.close();
  });

  it('puts the counts of logged steps after the other metrics, and scrolls a wide checkpoints table by itself', async () => {
    const w = await signedIn();
    await w.page.setViewportSize({ width: 1280, height: 800 });
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tbody tr').first().waitFor();
    const headers = await table.locator('thead th').allTextContents();
    expect(headers).toContain('loss/train');
    expect(await w.page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    // On a phone the table is wider than the screen: it scrolls within its box, which stays on screen.
    await w.page.setViewportSize({ width: 375, height: 800 });
    const box = await table.evaluate((t) => {
      const scroller = t.parentElement!;
      const section = t.closest('section')!;
      return { scrolls: scroller.scrollWidth > scroller.clientWidth, sectionFits: section.scrollWidth <= section.clientWidth };
    });
    expect(box).toEqual({ scrolls: true, sectionFits: true });
    w.expectClean();
    await w.context.close();
  });

  it('lists the jobs newest first, as the API does', async () => {
    const api = await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs?model_id=${model.id}&limit=100`);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const rows = w.page.getByRole('table', { name: 'Jobs' }).locator('tbody tr');
    await rows.first().waitFor();
    const hrefs = await rows.locator('a').evaluateAll((links) => links.map((a) => a.getAttribute('href')));
    expect(hrefs).toEqual(api.body.data.map((j: any) => `/ui/jobs/${j.id}`));
    w.expectClean();
    await w.context.close();
  });

  it('lists the newest 200 of a model\'s jobs and says older ones are not listed', { timeout: 120_000 }, async () => {
    const busy = (await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'agent-busy', base_model: 'base-busy' })).body;
    for (let i = 0; i < 201; i++) {
      const job = await call(server.app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: busy.id, trajectory_groups: [groupGenerationA()] });
      expect(job.status, job.text).toBe(200);
    }
    const newest = await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs?model_id=${busy.id}&limit=1`);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${busy.id}`);
    await w.page.getByText('The newest 200 jobs; older ones are not listed here.').waitFor();
    const rows = w.page.getByRole('table', { name: 'Jobs' }).locator('tbody tr');
    expect(await rows.count()).toBe(200);
    expect(await rows.first().locator('a').getAttribute('href')).toBe(`/ui/jobs/${newest.body.data[0].id}`);
    w.expectClean();
    await w.context.close();
  });

  it('draws an all-zero exception rate on a 0 to 1 axis', async () => {
    const metrics = await call(server.app, user.headers, 'GET', `/v1/preview/models/${model.id}/metrics`);
    expect(metrics.body.data.every((r: any) => r.metrics[`${r.split}/exception_rate`] === 0)).toBe(true);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const chart = w.page.locator('[data-chart="Exception rate"][data-y-max]');
    await chart.waitFor();
    expect([await chart.getAttribute('data-y-min'), await chart.getAttribute('data-y-max')]).toEqual(['0', '1']);
    w.expectClean();
    await w.context.close();
  });

  it('marks NaN and infinite values of a W&B history on the chart and says at which steps', async () => {
    // wandb-core writes non-finite floats as bare NaN / Infinity tokens.
    const loss = ['1.0', '0.5', '0.25', 'NaN', 'NaN', 'Infinity'];
    const m = await modelWithHistory('diverged', loss.map((value, step) => `{"_step": ${step}, "loss/train": ${value}}`));
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${m.id}`);
    const chart = w.page.locator('[data-chart="loss/train"]');
    await chart.locator('canvas').waitFor();
    expect(await chart.getAttribute('data-nonfinite')).toBe('3');
    expect(await chart.getAttribute('data-points')).toBe('6');
    const note = w.page.getByRole('region', { name: 'W&B run' }).locator('figure', { has: chart }).locator('[data-nonfinite-note]');
    expect(await note.textContent()).toBe('NaN at steps 3–4 · Infinity at step 5');
    w.expectClean();
    await w.context.close();
  });

  it('labels a linear axis at any magnitude (1e300, 1e-17, 1e-300), each label distinct and with room to show whole', async () => {
    const values: Record<string, number[]> = { huge: [1e300, 2e300, 3e300], tiny: [1e-17, 1.2e-17, 1.4e-17], near_1e_300: [1e-300, 2e-300, 3e-300], spread: [-1.5e308, 0, 1.5e308] };
    const lines = [0, 1, 2].map((step) => JSON.stringify({ _step: step, ...Object.fromEntries(Object.entries(values).map(([key, v]) => [key, v[step]])) }));
    const m = await modelWithHistory('extremes', lines);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${m.id}`);
    for (const [key, v] of Object.entries(values)) {
      const chart = w.page.locator(`[data-chart="${key}"]`);
      await chart.locator('canvas').waitFor();
      await w.page.waitForFunction((k) => document.querySelector(`[data-chart="${k}"]`)?.hasAttribute('data-y-ticks'), key);
      const [lo, hi] = [Number(await chart.getAttribute('data-y-min')), Number(await chart.getAttribute('data-y-max'))];
      // The axis spans the values, and is of their size: not 0 to 100 for values near 1e-300.
      expect([key, lo <= v[0] && hi >= v[2], hi - lo <= 2 * (v[2] - v[0]) || hi / 2 - lo / 2 <= v[2] - v[0]]).toEqual([key, true, true]);
      const ticks: string[] = JSON.parse((await chart.getAttribute('data-y-ticks'))!);
      // Labelled (as densely as uPlot's 30 pixels between ticks allows), each label a number on the axis, told apart.
      expect([key, ticks.length >= 1, new Set(ticks).size === ticks.length, ticks.every((t) => Number(t) >= lo && Number(t) <= hi)]).toEqual([key, true, true, true]);
      const widest = await w.page.evaluate((labels) => {
        const ctx = document.createElement('canvas').getContext('2d')!;
        ctx.font = '12px sans-serif';
        return Math.max(...labels.map((label) => ctx.measureText(label).width));
      }, ticks);
      expect(Number(await chart.getAttribute('data-y-axis-width'))).toBeGreaterThan(widest);
    }
    w.expectClean();
    await w.context.close();
  });

  it('shows a small value in the hover legend as the axis writes it, not rounded to 0', async () => {
    const m = await modelWithHistory('small-lr', [0, 1, 2].map((step) => `{"_step": ${step}, "learning_rate": 3.5e-6}`));
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${m.id}`);
    const chart = w.page.locator('[data-chart="learning_rate"]');
    await chart.locator('canvas').waitFor();
    const over = (await chart.locator('.u-over').boundingBox())!;
    await w.page.mouse.move(over.x + over.width - 1, over.y + over.height / 2);
    const row = chart.locator('.u-legend .u-series').filter({ has: w.page.locator('.u-label', { hasText: /^learning_rate$/ }) });
    await w.page.waitForFunction(() => document.querySelector('[data-chart="learning_rate"] .u-legend .u-series .u-value')?.textContent === '2');
    expect(await row.locator('.u-value').textContent()).toBe('3.5e-6');
    w.expectClean();
    await w.context.close();
  });

  it('resets a zoomed chart on a double-click without opening the rollouts of the step under it', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const over = w.page.locator('[data-chart="Reward"] .u-over');
    await over.waitFor();
    const box = (await over.boundingBox())!;
    await w.page.mouse.dblclick(box.x + box.width - 2, box.y + box.height / 2);
    await w.page.waitForTimeout(600);
    expect(new URL(w.page.url()).pathname).toBe(`/ui/models/${model.id}`);
    // One click still opens them.
    await w.page.mouse.click(box.x + box.width - 2, box.y + box.height / 2);
    await w.page.getByRole('heading', { name: /Rollouts at step/ }).waitFor();
    w.expectClean();
    await w.context.close();
  });

  it('refuses Keep best without a metric rather than save it as none, and clears an earlier note on an error', async () => {
    const created = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'retention-form', base_model: 'b' });
    const id = created.body.id;
    await sql`insert into checkpoints (id, model_id, step, uri, metrics) values (gen_random_uuid(), ${id}, 1, 's3://c/1', '{"score": 1}'::jsonb)`.execute(server.app.db);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${id}`);
    const form = w.page.getByRole('form', { name: 'Retention policy' });
    await form.locator('input[name="keep_latest"]').fill('2');
    await form.getByRole('button', { name: 'Save' }).click();
    await w.page.locator('[data-retention-note]').getByText('Saved.', { exact: false }).waitFor();
    await form.locator('input[name="keep_best"]').fill('3');
    await form.getByRole('button', { name: 'Save' }).click();
    await w.page.getByRole('alert').getByText('Keep best needs a metric to rank the checkpoints by: choose one, or clear Keep best.').waitFor();
    expect(await w.page.locator('[data-retention-note]').count()).toBe(0);
    const policy = await call(server.app, user.headers, 'GET', `/v1/preview/models/${id}/retention`);
    expect(policy.body).toMatchObject({ keep_latest: 2, keep_best: null, best_metric: null });
    w.expectClean();
    await w.context.close();
  });

  it('refuses retention values out of bounds in the form\'s own units, and names the field of an API refusal', async () => {
    const created = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'retention-bounds', base_model: 'b' });
    const id = created.body.id;
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${id}`);
    const form = w.page.getByRole('form', { name: 'Retention policy' });
    const refusal = w.page.getByRole('alert');
    await form.locator('input[name="ttl_hours"]').fill('100000');
    await form.getByRole('button', { name: 'Save' }).click();
    await refusal.getByText('Others expire after must be from one minute (0.0167 hours) to ten years (87,600 hours), or empty for never.').waitFor();
    await form.locator('input[name="ttl_hours"]').fill('0.01');
    await form.getByRole('button', { name: 'Save' }).click();
    await refusal.getByText('Others expire after must be from one minute (0.0167 hours)', { exact: false }).waitFor();
    await form.locator('input[name="ttl_hours"]').fill('87600');
    await form.locator('input[name="keep_latest"]').fill('10001');
    await form.getByRole('button', { name: 'Save' }).click();
    await refusal.getByText('Keep latest must be a whole number from 1 to 10,000, or empty.').waitFor();
    expect((await call(server.app, user.headers, 'GET', `/v1/preview/models/${id}/retention`)).body).toMatchObject({ keep_latest: null, ttl_seconds: null });

    // A refusal the form does not foresee (a server with other bounds): the API's own 422, each problem
    // under the form's name for its field.
    const refused = await call(server.app, user.headers, 'PUT', `/v1/preview/models/${id}/retention`, { keep_latest: 0, ttl_seconds: 10 });
    expect(refused.status).toBe(422);
    await w.page.route(`**/v1/preview/models/${id}/retention`, (route) =>
      route.request().method() === 'PUT' ? route.fulfill({ status: 422, contentType: 'application/json', body: refused.text }) : route.continue(),
    );
    await form.locator('input[name="keep_latest"]').fill('2');
    await form.getByRole('button', { name: 'Save' }).click();
    await refusal.getByText('Keep latest: Input should be greater than or equal to 1; Others expire after: Input should be greater than or equal to 60', { exact: true }).waitFor();
    w.expectClean([/status of 422 \(Unprocessable Entity\)/]);
    await w.context.close();
  });

  it('reads the best checkpoint again once a retention apply deleted it', async () => {
    const created = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'best-after-apply', base_model: 'b' });
    const id = created.body.id;
    await sql`
      insert into checkpoints (id, model_id, step, uri, metrics)
      select gen_random_uuid(), ${id}, g, 's3://c/' || g, jsonb_build_object('score', case g when 1 then 0.9 when 2 then 0.1 else 0.2 end)
      from generate_series(1, 3) g`.execute(server.app.db);
    // The policy keeps the latest only: its apply deletes steps 1 and 2, step 1 the best by score.
    expect((await call(server.app, user.headers, 'PUT', `/v1/preview/models/${id}/retention`, { keep_latest: 1 })).status).toBe(200);
    const w = await signedIn();
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/models/${id}`);
    await w.page.locator('select[name="best-metric"]').selectOption('score');
    await w.page.locator('[data-best]').getByText(': step 1 (0.9000)').waitFor();
    await w.page.getByRole('button', { name: 'Apply now' }).click();
    await w.page.getByText('Deleted steps 1, 2.').waitFor();
    await w.page.locator('[data-best]').getByText(': step 3 (0.2000)').waitFor();
    w.expectClean();
    await w.context.close();
  });

  it('shows the newest of 5,200 checkpoints first, 100 at a time, with badges from the server', async () => {
    const created = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'many-checkpoints', base_model: 'b' });
    const id = created.body.id;
    // More checkpoints than a test can train: inserted directly, as the 10,000-step chart's metrics are.
    // val/reward peaks at step 2000, far from the newest page.
    await sql`
      insert into checkpoints (id, model_id, step, uri, metrics)
      select gen_random_uuid(), ${id}, g, 's3://c/' || g, jsonb_build_object('val/reward', 1 - abs(g - 2000) / 5200.0)
      from generate_series(0, 5199) g`.execute(server.app.db);
    expect((await call(server.app, user.headers, 'PUT', `/v1/preview/models/${id}/retention`, { best_metric: 'val/reward', keep_best: 1 })).status).toBe(200);
    const w = await signedIn();
    const lifecycle: string[] = [];
    w.page.on('request', (r) => {
      if (r.url().includes('/checkpoints/lifecycle')) lifecycle.push(r.url());
    });
    await w.page.goto(`${server.url}/ui/models/${id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tr[data-step="5199"]').waitFor({ timeout: 15_000 });
    const steps = () => table.locator('tbody tr').evaluateAll((rows) => rows.map((r) => Number(r.getAttribute('data-step'))));
    expect(await steps()).toEqual(Array.from({ length: 100 }, (_, i) => 5199 - i));
    expect(lifecycle).toHaveLength(1);
    await table.locator('tr[data-step="5199"] [data-kept]').getByText('latest').waitFor();
    // The best (step 2000) is not on this page, so no loaded row is marked best; the line above the table names it.
    expect(await table.locator('.badge-best').count()).toBe(0);
    await w.page.locator('[data-best]').getByText('(highest): step 2000 (', { exact: false }).waitFor();
    await w.page.getByText('100 newest of more').waitFor();
    await w.page.getByRole('button', { name: 'Load 100 more' }).click();
    await table.locator('tr[data-step="5000"]').waitFor();
    expect(await steps()).toEqual(Array.from({ length: 200 }, (_, i) => 5199 - i));
    expect(await table.locator('.badge-best').count()).toBe(0);
    w.expectClean();
    await w.context.close();
  });
});

describe('rollouts', () => {
  it('says a step that is not a whole number is not one, and asks the API nothing', async () => {
    const w = await signedIn();
    let asked = 0;
    w.page.on('request', (r) => {
      if (r.url().includes('/trajectories')) asked++;
    });
    await w.page.goto(`${server.url}/ui/models/${model.id}/rollouts?split=train&step=abc`);
    await w.page.getByRole('alert').getByText('"abc" is not a step: a step is a whole number from 0.').waitFor();
    expect(await w.page.locator('h1').textContent()).toBe('Rollouts, split train');
    expect(asked).toBe(0);
    w.expectClean();
    await w.context.close();
  });

  it('is reached from the model page by keys (a step typed, Enter), and shows tools, additional histories and captured exchanges', async () => {
    const rich = (await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'agent-rich', base_model: 'base-rich' })).body;
    const tools = [{ type: 'function', function: { name: 'move', parameters: { type: 'object' } } }];
    const trajectories = [
      {
        reward: 1,
        messages_and_choices: [{ role: 'user', content: 'Play.' }, { message: { role: 'assistant', content: 'I move left.' }, finish_reason: 'stop' }],
        tools,
        additional_histories: [{ messages_and_choices: [{ role: 'user', content: 'Summarize the game.' }, { role: 'assistant', content: 'Won at 2048.' }] }],
      },
      {
        reward: 0,
        exchanges: {
          chat_completions: [
            { request: { messages: [{ role: 'user', content: 'What is 2+2?' }] }, response: { choices: [{ index: 0, message: { role: 'assistant', content: '4' }, finish_reason: 'stop' }] } },
          ],
          completions: [{ request: { prompt: 'The sky is' }, response: { choices: [{ text: ' blue' }] } }],
        },
      },
    ];
    expect((await call(server.app, user.headers, 'POST', `/v1/preview/models/${rich.id}/log`, { split: 'train', trajectory_groups: [{ trajectories }] })).status).toBe(200);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${rich.id}`);
    const form = w.page.getByRole('form', { name: 'Open rollouts' });
    const step = form.locator('input[name="rollout_step"]');
    await step.waitFor();
    // The last step logged, typed over.
    expect(await step.inputValue()).toBe('0');
    await step.focus();
    await w.page.keyboard.press('Control+A');
    // A number field takes 0e0 as 0: the step goes to the URL as a number.
    await w.page.keyboard.type('0e0');
    await w.page.keyboard.press('Enter');
    await w.page.getByRole('heading', { name: 'Rollouts at step 0, split train' }).waitFor();
    const [played, captured] = [w.page.locator('article.trajectory').nth(0), w.page.locator('article.trajectory').nth(1)];
    await played.waitFor();
    expect(await played.locator('details.tools summary').textContent()).toBe('Tools: move');
    expect(await played.locator(':scope > .messages pre').allTextContents()).toEqual(['Play.', 'I move left.']);
    expect(await played.getByRole('region', { name: 'Additional history 1' }).locator('pre').allTextContents()).toEqual(['Summarize the game.', 'Won at 2048.']);
    expect(await captured.getByRole('region', { name: 'Exchanges: chat_completions' }).locator('.bubble pre').allTextContents()).toEqual(['What is 2+2?', '4']);
    const completions = captured.getByRole('region', { name: 'Exchanges: completions' });
    expect(JSON.parse((await completions.locator('pre.json').textContent())!)).toEqual(trajectories[1].exchanges!.completions[0]);
    w.expectClean();
    await w.context.close();
  });

  it('shows the groups of a step whose rewards span more than a double holds (±1e308)', async () => {
    const wide = (await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'agent-wide', base_model: 'base-wide' })).body;
    const trajectories = [1e308, -1e308, 0].map((reward, i) => ({ reward, messages_and_choices: [{ role: 'user', content: `t${i}` }] }));
    expect((await call(server.app, user.headers, 'POST', `/v1/preview/models/${wide.id}/log`, { split: 'train', trajectory_groups: [{ trajectories }] })).status).toBe(200);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${wide.id}/rollouts?split=train&step=0`);
    await w.page.getByText('1 groups, 3 trajectories.').waitFor();
    const counts = await w.page.locator('.histogram .bar').evaluateAll((bars) => bars.map((b) => Number(b.getAttribute('data-count'))));
    expect(counts).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    w.expectClean();
    await w.context.close();
  });

  it('drops the groups shown once another split fails to load, rather than show them under its name', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}/rollouts?split=train&step=1`);
    await w.page.locator('section.group').first().waitFor();
    const split = w.page.locator('input[name="split"]');
    await split.fill('s'.repeat(129));
    await split.press('Enter');
    await w.page.getByRole('alert').getByText('String should have at most 128 characters').waitFor();
    expect(await w.page.locator('section.group').count()).toBe(0);
    expect(await w.page.locator('.histogram').count()).toBe(0);
    w.expectClean([/status of 422/]);
    await w.context.close();
  });

  it('shows the first 500 groups of a step that logged more, 25 to a page, and says more were logged', { timeout: 120_000 }, async () => {
    const many = (await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'agent-many', base_model: 'base-many' })).body;
    const groups = Array.from({ length: 501 }, (_, i) => groupGenerationA([i / 501]));
    const logged = await call(server.app, user.headers, 'POST', `/v1/preview/models/${many.id}/log`, { split: 'train', trajectory_groups: groups });
    expect(logged.status, logged.text).toBe(200);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${many.id}/rollouts?split=train&step=0`);
    await w.page.getByText('The first 500 groups logged at this step and split (more were logged), 500 trajectories.').waitFor();
    // The histogram covers all 500; the groups show 25 at a time.
    const counts = await w.page.locator('.histogram .bar').evaluateAll((bars) => bars.map((b) => Number(b.getAttribute('data-count'))));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(500);
    expect(await w.page.locator('section.group').count()).toBe(25);
    await w.page.getByText('Page 1 of 20').waitFor();
    await w.page.getByRole('button', { name: 'Next' }).click();
    await w.page.getByRole('region', { name: 'Group 26' }).waitFor();
    expect(await w.page.locator('section.group').count()).toBe(25);
    expect(new URL(w.page.url()).searchParams.get('page')).toBe('1');
    w.expectClean();
    await w.context.close();
  });
});

describe('usage', () => {
  it('sends a from with a time zone offset encoded, so the API reads it as sent', async () => {
    const w = await signedIn();
    const asked: string[] = [];
    w.page.on('request', (r) => {
      if (r.url().includes('/v1/usage')) asked.push(new URL(r.url()).searchParams.get('from') ?? '');
    });
    const from = '2026-01-01T00:00:00+01:00';
    await w.page.goto(`${server.url}/ui/p/${user.entity}/rl/usage?from=${encodeURIComponent(from)}`);
    await w.page.getByRole('table', { name: 'Usage by model' }).waitFor();
    expect(await w.page.getByRole('alert').count()).toBe(0);
    expect(asked.length).toBeGreaterThan(0);
    expect(asked.every((value) => value === from)).toBe(true);
    w.expectClean();
    await w.context.close();
  });
});

describe('job page', () => {
  it('follows the event stream again after a dropped and a refused one, from the last event read, saying so, until the job ends', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const claimed = await queued.claim();
    await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 1 } }]);
    const running = (await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs/${queued.jobId}`)).body;
    const [started] = (await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs/${queued.jobId}/events`)).body.data;
    const w = await signedIn();
    const opened: string[] = [];
    await w.page.route(`**/v1/preview/training-jobs/${queued.jobId}/events/stream*`, async (route) => {
      opened.push(new URL(route.request().url()).search);
      if (opened.length === 1) {
        // The job and its first event, then the connection drops.
        const body = `retry: 1000\n\nevent: job\ndata: ${JSON.stringify(running)}\n\nid: ${started.id}\nevent: training_started\ndata: ${JSON.stringify(started)}\n\n`;
        await route.fulfill({ status: 200, contentType: 'text/event-stream', body });
      } else if (opened.length === 2) {
        // A restarting server refuses the next one.
        await route.fulfill({ status: 503, contentType: 'application/json', body: '{"detail":"restarting"}' });
      } else {
        await route.continue();
      }
    });
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    await w.page.locator('h1 .badge', { hasText: 'RUNNING' }).waitFor();
    const retrying = w.page.getByRole('status').filter({ hasText: 'Could not refresh' });
    await retrying.getByText('restarting', { exact: false }).waitFor();
    expect(await retrying.textContent()).toBe('Could not refresh (restarting); retrying in 2 s.');
    await retrying.waitFor({ state: 'detached', timeout: 20_000 });
    expect(opened).toEqual(['', `?after=${started.id}`, `?after=${started.id}`]);
    await worker.events(claimed, [{ type: 'gradient_step', data: { loss: 0.5 } }]);
    await worker.complete(claimed, {});
    await w.page.locator('h1 .badge', { hasText: 'COMPLETED' }).waitFor();
    await w.page.locator('tr[data-type="training_ended"]').waitFor();
    const types = await w.page.locator('table[aria-label="Events"] tbody tr').evaluateAll((rows) => rows.map((row) => row.getAttribute('data-type')));
    // Newest first.
    expect(types).toEqual(['training_ended', 'gradient_step', 'training_started']);
    expect(opened).toHaveLength(3);
    w.expectClean([FAILED_503]);
    await w.context.close();
  });

  it('says why when the job is not there for this key, and stops', async () => {
    const w = await signedIn();
    const unknown = crypto.randomUUID();
    let opened = 0;
    await w.page.route('**/events/stream*', async (route) => {
      opened++;
      await route.continue();
    });
    await w.page.goto(`${server.url}/ui/jobs/${unknown}`);
    await w.page.getByText(`training job ${unknown} not found`).waitFor();
    await w.page.waitForTimeout(2500);
    expect(opened).toBe(1);
    w.expectClean([/status of 404/]);
    await w.context.close();
  });

  it('charts the gradient steps of the last attempt only, from step 1', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const first = await queued.claim();
    await worker.events(first, [{ type: 'training_started', data: { num_sequences: 1 } }, ...[1, 2].map((i) => ({ type: 'gradient_step', data: { loss: 10 * i } }))]);
    await worker.fail(first, 'out of memory', true);
    const second = await queued.claim();
    await worker.events(second, [{ type: 'training_started', data: { num_sequences: 1 } }, ...[1, 2, 3].map((i) => ({ type: 'gradient_step', data: { loss: 1 / i } }))]);
    await worker.complete(second, {});
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    const chart = w.page.locator('[data-chart="loss"]');
    await chart.locator('canvas').waitFor();
    expect(await chart.getAttribute('data-points')).toBe('3');
    expect(Number(await chart.getAttribute('data-y-max'))).toBeLessThan(10);
    w.expectClean();
    await w.context.close();
  });

  it('wraps an error message holding a long token within the page, at 1280 and at 375 pixels', async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const claimed = await queued.claim();
    await worker.fail(claimed, `adapter sha256:${'ab12'.repeat(750)} does not match`, false);
    for (const width of [1280, 375]) {
      const w = await signedIn();
      await w.page.setViewportSize({ width, height: 800 });
      await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
      await w.page.locator('h1 .badge', { hasText: 'FAILED' }).waitFor();
      await w.page.getByText('does not match', { exact: false }).first().waitFor();
      const facts = await w.page.locator('dl.facts').evaluate((dl) => dl.scrollWidth <= dl.clientWidth);
      expect(facts, `width ${width}`).toBe(true);
      w.expectClean();
      await w.context.close();
    }
  });
});
