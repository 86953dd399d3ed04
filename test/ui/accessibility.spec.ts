import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { call, type ScriptedWorker } from '../training/fixtures.js';
import { openPage, signInContext, startUi, type UiServer, type WatchedPage } from './harness.js';
import { insertUsageRows, queueJob, seedTrainedModel, upsertCalls } from './seed.js';

/**
 * What a keyboard and screen-reader user depends on: each page named in the document title, the focus
 * kept somewhere sensible, controls named, and changes announced.
 */

let server: UiServer;
let user: TestUser;
let admin: TestUser;
let model: { id: string; name: string; project: string };
let worker: ScriptedWorker;
let jobId: string;
const DEPTH = 60;

beforeAll(async () => {
  server = await startUi();
  user = await createUserWithKey(server.app, { prefix: 'ally' });
  admin = await createUserWithKey(server.app, { prefix: 'allyroot', isAdmin: true });
  const seeded = await seedTrainedModel(server.app, user, { project: 'rl', name: 'agent-a11y', steps: 3 });
  model = seeded.model;
  worker = seeded.worker;
  jobId = (await call(server.app, user.headers, 'GET', `/v1/preview/training-jobs?model_id=${model.id}&limit=1`)).body.data[0].id;
  await upsertCalls(server.app, user, `${user.entity}/rl`, [{ id: 'a11y-root', trace_id: 'a11y-trace', op_name: 'agent.run', startedAt: new Date('2026-11-20T10:00:00Z') }]);
  // An agent that recursed 60 calls deep: call dN is at level N + 1.
  const t0 = Date.parse('2026-11-20T11:00:00Z');
  await upsertCalls(
    server.app,
    user,
    `${user.entity}/rl`,
    Array.from({ length: DEPTH }, (_, i) => ({ id: `d${i}`, trace_id: 'deep', parent_id: i ? `d${i - 1}` : undefined, op_name: `step_${i}`, startedAt: new Date(t0 + i), latencyMs: 5 })),
  );
}, 180_000);
afterAll(() => server?.close());

async function signedIn(who: TestUser = user): Promise<WatchedPage> {
  const w = await openPage(server);
  await signInContext(w.context, server.url, who.key);
  return w;
}

/** The focused element, as "TAG: text". */
const focused = (w: WatchedPage) => w.page.evaluate(() => `${document.activeElement?.tagName}: ${document.activeElement?.textContent?.trim() ?? ''}`);

async function waitForFocus(w: WatchedPage, expected: string): Promise<void> {
  await w.page
    .waitForFunction((want) => `${document.activeElement?.tagName}: ${document.activeElement?.textContent?.trim() ?? ''}` === want, expected, { timeout: 10_000 })
    .catch(async () => expect(await focused(w)).toBe(expected));
}

describe('page titles and focus after navigation', () => {
  it('names every page in the document title', async () => {
    const project = `${user.entity}/rl`;
    const pages: [string, string][] = [
      ['/ui/', 'Projects · trainyard'],
      [`/ui/p/${project}/models`, `Models · ${project} · trainyard`],
      [`/ui/models/${model.id}`, `Model ${model.name} · trainyard`],
      [`/ui/models/${model.id}/rollouts?split=train&step=1`, 'Rollouts at step 1, split train · trainyard'],
      [`/ui/jobs/${jobId}`, `RL job ${jobId.slice(0, 8)} · trainyard`],
      [`/ui/p/${project}/traces`, `Traces · ${project} · trainyard`],
      [`/ui/p/${project}/traces/a11y-trace`, `Trace a11y-trace · ${project} · trainyard`],
      [`/ui/p/${project}/threads`, `Threads · ${project} · trainyard`],
      [`/ui/p/${project}/evaluations`, `Evaluations · ${project} · trainyard`],
      [`/ui/p/${project}/datasets`, `Datasets · ${project} · trainyard`],
      [`/ui/p/${project}/usage`, `Usage · ${project} · trainyard`],
      ['/ui/admin', 'Admin · trainyard'],
      ['/ui/nowhere', 'Not found · trainyard'],
    ];
    const w = await signedIn();
    for (const [path, title] of pages) {
      await w.page.goto(`${server.url}${path}`);
      await w.page.waitForFunction((want) => document.title === want, title, { timeout: 10_000 }).catch(async () => expect(await w.page.title(), path).toBe(title));
    }
    w.expectClean();
    await w.context.close();
  });

  it('moves the focus to the new page heading after a link, a header link and Back, and not on a page load', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/`);
    await w.page.getByRole('heading', { name: 'Projects' }).waitFor();
    expect(await focused(w)).toMatch(/^BODY/);
    await w.page.getByRole('link', { name: `${user.entity}/rl` }).focus();
    await w.page.keyboard.press('Enter');
    await waitForFocus(w, 'H1: Models');
    // A heading that comes with the page's data.
    await w.page.getByRole('link', { name: model.name }).focus();
    await w.page.keyboard.press('Enter');
    await waitForFocus(w, `H1: ${model.name}`);
    expect(await w.page.title()).toBe(`Model ${model.name} · trainyard`);
    // The header's link stays on the page: the focus still leaves it for the new page.
    await w.page.getByRole('link', { name: 'trainyard' }).focus();
    await w.page.keyboard.press('Enter');
    await waitForFocus(w, 'H1: Projects');
    await w.page.goBack();
    await waitForFocus(w, `H1: ${model.name}`);
    w.expectClean();
    await w.context.close();
  });
});

describe('trace tree', () => {
  /** Whether the row's op name is drawn inside the tree's visible box. */
  const opInView = (w: WatchedPage, callId: string) =>
    w.page.locator(`.tree-row[data-call="${callId}"] .op`).evaluate((op) => {
      const box = op.closest('.tree')!.getBoundingClientRect();
      const r = op.getBoundingClientRect();
      return r.width > 20 && r.left >= box.left && r.right <= box.right && r.top >= box.top && r.bottom <= box.bottom;
    });

  it('shows a row 59 levels deep with its name and its level, the indent capped', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${user.entity}/rl/traces/deep`);
    const tree = w.page.getByRole('tree', { name: 'Calls' });
    await tree.locator('[data-call="d0"]').waitFor();
    await tree.focus();
    await tree.press('End');
    await w.page.waitForURL(/call=d59/);
    const row = tree.locator('[data-call="d59"]');
    expect(await row.getAttribute('aria-level')).toBe('60');
    expect(await opInView(w, 'd59')).toBe(true);
    expect(await row.locator('.depth').textContent()).toBe('↳60');
    // Rows within the cap are indented and show no level.
    await tree.press('Home');
    expect(await tree.locator('[data-call="d0"] .depth').count()).toBe(0);
    w.expectClean();
    await w.context.close();
  });

  it('scrolls a linked call deep in the tree into view and puts the focus on it', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${user.entity}/rl/traces/deep?call=d45`);
    const tree = w.page.getByRole('tree', { name: 'Calls' });
    const row = tree.locator('[data-call="d45"]');
    await row.waitFor();
    await w.page.waitForFunction(() => document.activeElement?.getAttribute('role') === 'tree');
    expect(await row.getAttribute('aria-selected')).toBe('true');
    expect(await tree.getAttribute('aria-activedescendant')).toBe(await row.getAttribute('id'));
    expect(await opInView(w, 'd45')).toBe(true);
    // The keys go on from there.
    await w.page.keyboard.press('ArrowDown');
    await w.page.waitForURL(/call=d46/);
    w.expectClean();
    await w.context.close();
  });
});

describe('long names without spaces', () => {
  const LONG_MODEL = `agent_${'very.long_model_name_'.repeat(6)}`.slice(0, 120);
  const LONG_OP = `weave:///e/p/op/${'deeply.nested_module_function_name_'.repeat(14)}:abc`;

  /** Whether the page itself scrolls sideways. */
  const scrollsSideways = (w: WatchedPage) => w.page.evaluate(() => document.documentElement.scrollWidth > document.documentElement.clientWidth);

  it('wraps a 120-character model name: neither the models list nor the model page scrolls sideways', async () => {
    const created = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'names', name: LONG_MODEL, base_model: 'b' });
    expect(created.status, created.text).toBe(200);
    const w = await signedIn();
    for (const width of [1280, 375]) {
      await w.page.setViewportSize({ width, height: 800 });
      await w.page.goto(`${server.url}/ui/p/${user.entity}/names/models`);
      await w.page.getByRole('link', { name: LONG_MODEL }).waitFor();
      expect(await scrollsSideways(w), `models at ${width}`).toBe(false);
      await w.page.goto(`${server.url}/ui/models/${created.body.id}`);
      await w.page.getByRole('heading', { name: LONG_MODEL }).waitFor();
      expect(await scrollsSideways(w), `model at ${width}`).toBe(false);
    }
    w.expectClean();
    await w.context.close();
  });

  it('cuts a long op name in the traces table with an ellipsis, the whole name in its title, so every column shows', async () => {
    const project = `${user.entity}/long-ops`;
    const t0 = Date.parse('2026-11-20T12:00:00Z');
    await upsertCalls(server.app, user, project, [
      { id: 'long-op', trace_id: 'long-op', op_name: LONG_OP, startedAt: new Date(t0), latencyMs: 10 },
      { id: 'short-op', trace_id: 'short-op', op_name: 'weave:///e/p/op/predict:abc', startedAt: new Date(t0 + 1000), latencyMs: 20 },
    ]);
    const w = await signedIn();
    await w.page.setViewportSize({ width: 1280, height: 800 });
    await w.page.goto(`${server.url}/ui/p/${project}/traces`);
    const table = w.page.getByRole('table', { name: 'Traces' });
    await table.locator('tbody tr').nth(1).waitFor();
    const name = LONG_OP.slice('weave:///e/p/op/'.length, -':abc'.length);
    const link = table.getByRole('link', { name });
    expect(await link.getAttribute('title')).toBe(name);
    expect(await table.evaluate((t) => t.scrollWidth <= t.parentElement!.clientWidth)).toBe(true);
    expect(await scrollsSideways(w)).toBe(false);
    w.expectClean();
    await w.context.close();
  });
});

describe('admin forms', () => {
  it('names every field by a visible label, and announces what a form did in a live region', async () => {
    const w = await signedIn(admin);
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/admin`);
    await w.page.getByRole('button', { name: 'Create key' }).waitFor();
    for (const [role, name] of [
      ['textbox', 'Username'],
      ['textbox', 'Team name'],
      ['textbox', 'Team'],
      ['textbox', "Member's username"],
      ['textbox', 'Key for user'],
      ['textbox', 'Key name'],
      ['combobox', 'Kind'],
    ] as const) {
      expect(await w.page.getByRole(role, { name, exact: true }).count(), name).toBe(1);
    }
    // No field is named by its placeholder alone.
    const unlabelled = await w.page.locator('main input:not([type=checkbox]), main select').evaluateAll((fields) =>
      fields.filter((f) => !(f as HTMLInputElement).labels?.length && !f.getAttribute('aria-label')).map((f) => f.getAttribute('name')),
    );
    expect(unlabelled).toEqual([]);

    // The live region is on the page before the message is written into it.
    const status = w.page.locator('[data-outcome]');
    expect(await status.getAttribute('role')).toBe('status');
    expect(await status.textContent()).toBe('');
    await w.page.getByRole('textbox', { name: 'Username', exact: true }).fill(`newbie-${Date.now()}`);
    await w.page.getByRole('button', { name: 'Create user' }).click();
    await status.getByText('User created.').waitFor();

    await w.page.getByRole('textbox', { name: 'Key for user' }).fill(user.username);
    await w.page.getByRole('textbox', { name: 'Key name' }).fill('a11y key');
    await w.page.getByRole('combobox', { name: 'Kind' }).selectOption('user');
    await w.page.getByRole('button', { name: 'Create key' }).click();
    await status.getByText('Key created.').waitFor();
    const keys = (await call(server.app, admin.headers, 'GET', `/v1/admin/keys?username=${user.username}`)).body.data;
    const created = keys.find((k: { name: string }) => k.name === 'a11y key');
    // Each row's Revoke names its key.
    const revoke = w.page.getByRole('button', { name: `Revoke key ${created.prefix}… of ${user.username}`, exact: true });
    expect(await revoke.count()).toBe(1);
    expect(await w.page.getByRole('columnheader', { name: 'Actions' }).count()).toBe(1);
    await revoke.click();
    await status.getByText('Key revoked.').waitFor();
    w.expectClean();
    await w.context.close();
  });
});

describe('focus kept when the focused button goes', () => {
  it('keeps the focus on Next and Previous at the last and the first page', async () => {
    const project = `${user.entity}/paged`;
    const t0 = Date.parse('2026-11-20T13:00:00Z');
    await upsertCalls(server.app, user, project, Array.from({ length: 30 }, (_, i) => ({ id: `p${i}`, trace_id: `p${i}`, op_name: 'agent.page', startedAt: new Date(t0 + i * 1000) })));
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/p/${project}/traces`);
    const next = w.page.getByRole('button', { name: 'Next' });
    await w.page.getByText('Page 1 of 2').waitFor();
    await next.focus();
    await w.page.keyboard.press('Enter');
    await w.page.getByText('Page 2 of 2').waitFor();
    expect(await next.getAttribute('aria-disabled')).toBe('true');
    await waitForFocus(w, 'BUTTON: Next');
    // At the end it does nothing.
    await w.page.keyboard.press('Enter');
    await w.page.waitForTimeout(300);
    expect(w.page.url()).toMatch(/page=1$/);
    const previous = w.page.getByRole('button', { name: 'Previous' });
    await previous.focus();
    await w.page.keyboard.press('Enter');
    await w.page.getByText('Page 1 of 2').waitFor();
    await waitForFocus(w, 'BUTTON: Previous');
    w.expectClean();
    await w.context.close();
  });

  it('puts the focus on the line that counts the checkpoints once "Load 100 more" has loaded the last', async () => {
    const created = await call(server.app, user.headers, 'POST', '/v1/preview/models', { project: 'rl', name: 'a11y-150', base_model: 'b' });
    await sql`
      insert into checkpoints (id, model_id, step, uri, metrics)
      select gen_random_uuid(), ${created.body.id}, g, 's3://c/' || g, jsonb_build_object('val/reward', g / 150.0)
      from generate_series(0, 149) g`.execute(server.app.db);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${created.body.id}`);
    await w.page.getByText('The 100 newest of more.').waitFor();
    await w.page.getByRole('button', { name: 'Load 100 more' }).focus();
    await w.page.keyboard.press('Enter');
    await w.page.getByText('All 150.').waitFor();
    await waitForFocus(w, 'SPAN: All 150.');
    w.expectClean();
    await w.context.close();
  });

  it("puts the focus on the Delete of the row that takes a deleted checkpoint's place", async () => {
    const w = await signedIn();
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const rows = w.page.getByRole('table', { name: 'Checkpoints' }).locator('tbody tr');
    await rows.first().waitFor();
    const steps = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-step')));
    expect(steps.length).toBeGreaterThanOrEqual(2);
    await rows.first().locator('[data-delete]').focus();
    await w.page.keyboard.press('Enter');
    await w.page.locator(`tr[data-step="${steps[0]}"]`).waitFor({ state: 'detached' });
    await w.page.waitForFunction((step) => document.activeElement?.closest('tr')?.getAttribute('data-step') === step, steps[1], { timeout: 10_000 });
    expect(await w.page.evaluate(() => document.activeElement?.hasAttribute('data-delete'))).toBe(true);
    w.expectClean();
    await w.context.close();
  });
});

describe('checkpoints table', () => {
  it('names each row by its step: a row header, and Copy, Pin, Download and Delete that say which step', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tbody tr').first().waitFor();
    const steps = await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-step')!));
    expect(steps.length).toBeGreaterThan(0);
    expect(await table.getByRole('rowheader').evaluateAll((cells) => cells.map((c) => c.textContent!.trim().split(' ')[0]))).toEqual(steps);
    expect(await table.getByRole('columnheader', { name: 'Actions' }).count()).toBe(1);
    for (const step of steps) {
      for (const name of [`Copy the inference name of step ${step}`, `Pin step ${step}`, `Delete step ${step}`]) {
        expect(await table.getByRole('button', { name, exact: true }).count(), name).toBe(1);
      }
      expect(await table.getByRole('link', { name: `Download step ${step}`, exact: true }).count()).toBe(1);
    }
    // Pinned, the button says Unpin with the step.
    await table.getByRole('button', { name: `Pin step ${steps[0]}`, exact: true }).click();
    await table.getByRole('button', { name: `Unpin step ${steps[0]}`, exact: true }).waitFor();
    await table.getByRole('button', { name: `Unpin step ${steps[0]}`, exact: true }).click();
    await table.getByRole('button', { name: `Pin step ${steps[0]}`, exact: true }).waitFor();
    w.expectClean();
    await w.context.close();
  });
});

describe('changes announced', () => {
  it("says a job's change of status in a live region", async () => {
    const queued = await queueJob(server.app, user, model, worker);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/jobs/${queued.jobId}`);
    await w.page.locator('h1 .badge', { hasText: 'QUEUED' }).waitFor();
    const said = w.page.getByRole('status').and(w.page.locator('[data-job-status]'));
    expect(await said.textContent()).toBe('');
    const claimed = await queued.claim();
    await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 1 } }]);
    await said.getByText('Job running.').waitFor();
    await worker.fail(claimed, 'out of memory', false);
    await said.getByText('Job failed: out of memory.').waitFor();
    w.expectClean();
    await w.context.close();
  });

  it('says "Copied" and the retention notes in live regions that are there before them', async () => {
    const w = await signedIn();
    w.page.on('dialog', (dialog) => void dialog.accept());
    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const table = w.page.getByRole('table', { name: 'Checkpoints' });
    await table.locator('tbody tr').first().waitFor();
    const regions = () => w.page.getByRole('status').count();
    const before = await regions();
    expect(before).toBeGreaterThanOrEqual(2);
    await table.getByRole('button', { name: 'Copy the inference name of step' }).first().click();
    await w.page.getByRole('status').filter({ hasText: 'Copied' }).locator('[data-copied]').waitFor();
    const form = w.page.getByRole('form', { name: 'Retention policy' });
    await form.getByRole('button', { name: 'Save' }).click();
    await w.page.getByRole('status').filter({ hasText: 'Saved.' }).locator('[data-retention-note]').waitFor();
    await form.getByRole('button', { name: 'Apply now' }).click();
    await w.page.getByRole('status').filter({ hasText: /Nothing to delete|Deleted steps/ }).locator('[data-retention-note]').waitFor();
    // The same regions, written into: none was added with its message.
    expect(await regions()).toBe(before);
    w.expectClean();
    await w.context.close();
  });
});

describe('charts in words', () => {
  it('sums up each chart for a screen reader, and hides the canvas and its hover legend', async () => {
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/jobs/${jobId}`);
    const loss = w.page.getByRole('figure', { name: 'loss' });
    await loss.locator('canvas').waitFor();
    // The last seeded job's one gradient step: loss 1/3.
    expect(await loss.locator('[data-chart-summary]').textContent()).toBe('loss: 1 point, at step 1: 0.3333.');
    expect(await loss.locator('[data-chart]').getAttribute('aria-hidden')).toBe('true');

    await w.page.goto(`${server.url}/ui/models/${model.id}`);
    const reward = w.page.getByRole('figure', { name: 'Reward' });
    await reward.locator('canvas').waitFor();
    const summary = (await reward.locator('[data-chart-summary]').textContent())!;
    expect(summary).toMatch(/^train\/reward: 3 points, steps 0 to 2; last [\d.]+; lowest [\d.]+ at step \d, highest [\d.]+ at step \d\. val\/reward: 3 points, /);
    w.expectClean();
    await w.context.close();
  });

  it('says the count of each bar of the reward histogram and the tokens of each day', async () => {
    await insertUsageRows(server.app, user, `${user.entity}/rl`, [
      { at: '2026-11-20T10:00:00Z', model: 'm', prompt: 1000, completion: 500 },
      { at: '2026-11-21T10:00:00Z', model: 'm', prompt: 10, completion: 5 },
    ]);
    const w = await signedIn();
    await w.page.goto(`${server.url}/ui/models/${model.id}/rollouts?split=train&step=1`);
    const bars = w.page.getByRole('figure', { name: 'Reward histogram' }).getByRole('listitem');
    await bars.first().waitFor();
    const said = await bars.evaluateAll((items) => items.map((item) => item.querySelector('.sr-only')!.textContent!));
    for (const text of said) expect(text).toMatch(/^[-\d.e+]+ to [-\d.e+]+: \d+ trajector(y|ies)$/);
    const total = said.reduce((n, text) => n + Number(/: (\d+) /.exec(text)![1]), 0);
    await w.page.getByText(`${total} trajectories.`, { exact: false }).waitFor();

    await w.page.goto(`${server.url}/ui/p/${user.entity}/rl/usage?from=2026-11-20&to=2026-11-22`);
    const days = w.page.getByRole('figure', { name: 'Tokens per day' }).getByRole('listitem');
    await days.first().waitFor();
    expect(await days.evaluateAll((items) => items.map((item) => item.querySelector('.sr-only')!.textContent))).toEqual(['2026-11-20: 1,500 tokens', '2026-11-21: 15 tokens']);
    w.expectClean();
    await w.context.close();
  });
});
