import fs from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';

let app: App | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function countUsers(app: App): Promise<number> {
  const row = await app.db.selectFrom('users').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Whether a key opens the admin API. */
async function isAdminKey(app: App, key: string): Promise<boolean> {
  const response = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: { authorization: `Bearer ${key}` } });
  return response.statusCode === 200;
}

/** Makes the next commit that inserted an API key fail, as a crash just before it would. */
async function failCommitsOfApiKeys(app: App): Promise<void> {
  await sql`create function refuse_commit() returns trigger language plpgsql as $$
    begin raise exception 'commit refused by the test'; end $$`.execute(app.db);
  await sql`create constraint trigger refuse_commit after insert on api_keys
    deferrable initially deferred for each row execute function refuse_commit()`.execute(app.db);
}

describe('the bootstrap admin', () => {
  it('on an empty database, gets a working key saved to DATA_DIR/admin-api-key readable by its owner only, once', async () => {
    app = await createTestApp({ AUTH_CACHE_TTL_MS: '0' });
    const dataDir = app.config.dataDir;
    const created = await app.auth.bootstrapAdmin(dataDir);
    expect(created).toEqual({ key: expect.stringMatching(/^ty_/), file: path.join(dataDir, 'admin-api-key') });
    expect(fs.readFileSync(created!.file, 'utf8')).toBe(`${created!.key}\n`);
    expect(fs.statSync(created!.file).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dataDir)).toEqual(['admin-api-key']);
    expect(await isAdminKey(app, created!.key)).toBe(true);

    expect(await app.auth.bootstrapAdmin(dataDir)).toBeUndefined();
    expect(fs.readFileSync(created!.file, 'utf8')).toBe(`${created!.key}\n`);
  });

  it('that crashed before its commit left no user, and the next start bootstraps again with a working key', async () => {
    app = await createTestApp({ AUTH_CACHE_TTL_MS: '0' });
    const dataDir = app.config.dataDir;
    await failCommitsOfApiKeys(app);
    await expect(app.auth.bootstrapAdmin(dataDir)).rejects.toThrow('commit refused by the test');
    expect(await countUsers(app)).toBe(0);
    // The file was written before the commit: it holds a key that never existed.
    const orphan = fs.readFileSync(path.join(dataDir, 'admin-api-key'), 'utf8').trim();
    expect(await isAdminKey(app, orphan)).toBe(false);

    await sql`drop trigger refuse_commit on api_keys`.execute(app.db);
    const restarted = await app.auth.bootstrapAdmin(dataDir);
    expect(restarted?.key).toMatch(/^ty_/);
    expect(fs.readFileSync(path.join(dataDir, 'admin-api-key'), 'utf8')).toBe(`${restarted!.key}\n`);
    expect(fs.statSync(path.join(dataDir, 'admin-api-key')).mode & 0o777).toBe(0o600);
    expect(await isAdminKey(app, restarted!.key)).toBe(true);
  });

  it('whose key file cannot be written creates no user, so the next start bootstraps again', async () => {
    app = await createTestApp({ AUTH_CACHE_TTL_MS: '0' });
    const notADirectory = path.join(app.config.dataDir, 'file');
    fs.writeFileSync(notADirectory, '');
    await expect(app.auth.bootstrapAdmin(notADirectory)).rejects.toThrow(/ENOTDIR|EEXIST/);
    expect(await countUsers(app)).toBe(0);

    const created = await app.auth.bootstrapAdmin(app.config.dataDir);
    expect(await isAdminKey(app, created!.key)).toBe(true);
  });
});
