import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { call } from '../training/fixtures.js';
import { openPage, screenshot, signInContext, startUi, type UiServer } from './harness.js';

/** The admin page's backups of an embedded database kept in files, in a real Chromium. */

let server: UiServer;
let admin: TestUser;
let dataDir: string;
beforeAll(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-ui-backups-'));
  server = await startUi({ BACKUP_KEEP: '3' }, { dataDir });
  admin = await createUserWithKey(server.app, { prefix: 'root', isAdmin: true });
}, 120_000);
afterAll(async () => {
  await server?.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('backups on the admin page', () => {
  it('lists none at first, takes one when asked, and shows it as the API lists it', async () => {
    const w = await openPage(server);
    await signInContext(w.context, server.url, admin.key);
    await w.page.goto(`${server.url}/ui/admin`);
    await w.page.getByText('No backup of this database yet.').waitFor();
    expect((await w.page.locator('[data-backup-settings]').textContent())!.replace(/\s+/g, ' ')).toBe(
      `In ${path.join(dataDir, 'backups')}; taken only when asked (BACKUP_INTERVAL_HOURS); the newest 3 kept. ` +
        'To restore one, stop the server and run npm run cli -- restore <path>.',
    );

    await w.page.getByRole('button', { name: 'Back up now' }).click();
    await w.page.getByText('Backup taken.').waitFor();
    expect(await w.page.getByRole('button', { name: 'Back up now' }).isEnabled()).toBe(true);
    const cells = w.page.getByRole('table', { name: 'Backups' }).locator('tbody tr td');
    await cells.first().waitFor();
    const listed = (await call(server.app, admin.headers, 'GET', '/v1/admin/backups')).body;
    expect(listed.data).toHaveLength(1);
    const [backup] = listed.data;
    expect(await cells.allTextContents()).toEqual([
      backup.created_at.replace('T', ' ').slice(0, 19),
      `${(backup.bytes / 1_000_000).toFixed(1)} MB`,
      '0',
      backup.path,
    ]);
    expect(fs.existsSync(path.join(backup.path, 'pgdata', 'PG_VERSION'))).toBe(true);
    await w.page.getByRole('heading', { name: 'Backups' }).scrollIntoViewIfNeeded();
    await screenshot(w.page, 'admin-backups');
    // No trainer worker called in: the system check shows gpu_queue failed, and no request failed for it.
    const checks = w.page.getByRole('table', { name: 'System check' });
    expect(await checks.locator('tr', { hasText: 'gpu_queue' }).locator('.badge').textContent()).toBe('failed');
    w.expectClean();
    await w.context.close();
  });
});
