import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { backupEmbedded } from '../../src/db/backup.js';
import { createPglite, pgliteDataPath, pgliteHandle } from '../../src/db/index.js';
import { createTestApp, createUserWithKey, testConfig, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The app on an embedded database in a data directory of its own, as a server runs. */
async function appOnDataDir(): Promise<{ app: App; dataDir: string }> {
  const dataDir = tempDir('trainyard-backup-');
  const pglite = await createPglite({ dataDir: pgliteDataPath(dataDir), loadDataDir: new Blob([fs.readFileSync(inject('pgliteTemplate'))]) });
  const app = await buildApp(testConfig({ DATA_DIR: dataDir }), { database: pgliteHandle(pglite, { dataDir }) });
  await app.ready();
  cleanups.push(() => app.close());
  return { app, dataDir };
}

const model = (user: TestUser, name: string) => ({ entity: user.entity, project: 'backups', name, base_model: 'Qwen/Qwen2.5-0.5B-Instruct' });

describe.skipIf(onPostgresServer)('backups of the embedded database', () => {
  it('copies it while it serves writes, and the copy opens with every write acknowledged before the backup', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir();
    const admin = await createUserWithKey(app, { isAdmin: true });
    for (let i = 0; i < 20; i++) {
      const created = await app.inject({ method: 'POST', url: '/v1/preview/models', headers: admin.headers, payload: model(admin, `before-${i}`) });
      expect(created.statusCode, created.body).toBe(200);
    }
    // Some 50 MB of write-ahead log, checkpointed: its segments stay in pg_wal, kept for reuse.
    await sql`create table wal_filler as select g, repeat(md5(g::text), 16) as filler from generate_series(1, 100000) g`.execute(app.db);
    await sql`checkpoint`.execute(app.db);
    // Writes under way while the backup is taken: each lands wholly before the copy or after it.
    const during = Array.from({ length: 20 }, (_, i) => app.inject({ method: 'POST', url: '/v1/preview/models', headers: admin.headers, payload: model(admin, `during-${i}`) }));
    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect((await Promise.all(during)).map((r) => r.statusCode)).toEqual(Array(20).fill(200));
    expect(response.statusCode, response.body).toBe(201);
    const backup = response.json();
    expect(backup).toEqual({ path: expect.any(String), bytes: expect.any(Number), held_ms: expect.any(Number), created_at: expect.any(String) });
    expect(path.dirname(backup.path)).toBe(path.join(dataDir, 'backups'));
    expect(fs.readdirSync(backup.path)).toEqual(['pgdata']);
    // The log segments PostgreSQL keeps for reuse stay behind; the lock file too.
    const segments = (dir: string) => fs.readdirSync(path.join(dir, 'pg_wal')).filter((name) => /^[0-9A-F]{24}$/.test(name)).length;
    expect(segments(pgliteDataPath(dataDir))).toBeGreaterThan(2);
    expect(segments(path.join(backup.path, 'pgdata'))).toBeLessThanOrEqual(2);
    expect(fs.existsSync(path.join(backup.path, 'pgdata', 'postmaster.pid'))).toBe(false);

    const copy = await createPglite({ dataDir: path.join(backup.path, 'pgdata') });
    cleanups.push(() => copy.close());
    const { rows } = await copy.query("select name from models where name like 'before-%' or name like 'during-%' order by name");
    const names = (rows as { name: string }[]).map((row) => row.name);
    expect(names.filter((name) => name.startsWith('before-'))).toHaveLength(20);
    // The app keeps serving after it: the backup let go of the database.
    expect((await app.inject({ method: 'POST', url: '/v1/preview/models', headers: admin.headers, payload: model(admin, 'after') })).statusCode).toBe(200);
  });

  it('holds the database for the copy: a write sent once it holds it waits, and is not in the copy', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir();
    const admin = await createUserWithKey(app, { isAdmin: true });
    let sent: Promise<number> | undefined;
    const backup = await backupEmbedded(app.database, path.join(dataDir, 'backups'), {
      onHeld: () => {
        sent = app.inject({ method: 'POST', url: '/v1/preview/models', headers: admin.headers, payload: model(admin, 'sent-while-held') }).then((r) => r.statusCode);
      },
    });
    expect(await sent).toBe(200);
    const copy = await createPglite({ dataDir: path.join(backup.path, 'pgdata') });
    cleanups.push(() => copy.close());
    expect((await copy.query("select count(*)::int as n from models where name = 'sent-while-held'")).rows).toEqual([{ n: 0 }]);
    expect((await copy.query('select count(*)::int as n from api_keys where id = $1', [admin.keyId])).rows).toEqual([{ n: 1 }]);
  });

  it('answers the system check meanwhile without waiting for the database, naming the backup', { timeout: 60_000 }, async () => {
    const { app } = await appOnDataDir();
    let during: { statusCode: number; body: Record<string, unknown> } | undefined;
    await app.backups.take({
      onHeld: async () => {
        const response = await app.inject({ method: 'GET', url: '/v1/system-check' });
        during = { statusCode: response.statusCode, body: response.json() };
      },
    });
    const held = { success: true, duration_ms: 0, database_held_by_backup_since: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) };
    expect(during).toEqual({ statusCode: 200, body: { api: expect.objectContaining({ success: true }), database: held, cpu_queue: held, gpu_queue: held } });
    // Once it is done, the checks run again.
    expect((await app.inject({ method: 'GET', url: '/v1/system-check' })).json().database).toEqual({ success: true, duration_ms: expect.any(Number) });
  });

  it('is finished before the app closes the database, when the app closes during it', { timeout: 60_000 }, async () => {
    const { app } = await appOnDataDir();
    let closing: Promise<void> | undefined;
    const backup = await app.backups.take({ onHeld: () => void (closing = app.close()) });
    await closing;
    const copy = await createPglite({ dataDir: path.join(backup.path, 'pgdata') });
    cleanups.push(() => copy.close());
    expect((await copy.query('select count(*)::int as n from users')).rows).toEqual([{ n: expect.any(Number) }]);
  });

  it('is for admins only', async () => {
    const { app, dataDir } = await appOnDataDir();
    const user = await createUserWithKey(app);
    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: user.headers });
    expect([response.statusCode, response.json()]).toEqual([403, { detail: 'This route needs an admin key.' }]);
    const anonymous = await app.inject({ method: 'POST', url: '/v1/admin/backups' });
    expect([anonymous.statusCode, anonymous.json()]).toEqual([
      401,
      { detail: 'Missing API key. Send it as "Authorization: Bearer <key>" (or HTTP Basic with the key as the password).' },
    ]);
    expect(fs.existsSync(path.join(dataDir, 'backups'))).toBe(false);
  });

  it('answers 409 for a database in memory, which has no files', async () => {
    const app = await createTestApp();
    cleanups.push(() => app.close());
    const admin = await createUserWithKey(app, { isAdmin: true });
    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect([response.statusCode, response.json()]).toEqual([409, { detail: "This server's embedded database is in memory: there are no files to back up." }]);
  });
});

describe.runIf(onPostgresServer)('backups on a PostgreSQL server', () => {
  it('answer 409, naming the server\'s own tools', async () => {
    const app = await createTestApp();
    cleanups.push(() => app.close());
    const admin = await createUserWithKey(app, { isAdmin: true });
    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect([response.statusCode, response.json()]).toEqual([
      409,
      { detail: "This server keeps its data on a PostgreSQL server (DATABASE_URL): back that up with pg_dump or the server's own tools." },
    ]);
  });
});
