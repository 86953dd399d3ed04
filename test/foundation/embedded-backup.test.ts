import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { backupEmbedded, EmbeddedBackups, linkOrCopy, nextBackupDelay, restoreEmbedded } from '../../src/db/backup.js';
import { createPglite, openDatabase, pgliteDataPath } from '../../src/db/index.js';
import { createTestApp, createUserWithKey, testConfig, type TestUser } from '../helpers/app.js';
import { embeddedDatabaseIn, onPostgresServer } from '../helpers/database.js';

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
async function appOnDataDir(env: Record<string, string> = {}, dataDir = tempDir('trainyard-backup-')): Promise<{ app: App; dataDir: string }> {
  const app = await buildApp(testConfig({ DATA_DIR: dataDir, ...env }), { database: await embeddedDatabaseIn(dataDir) });
  await app.ready();
  cleanups.push(() => app.close());
  return { app, dataDir };
}

/** An adapter's weights file: a safetensors header holding no tensors, told apart by `note`. */
const weights = (note: string) => {
  const header = Buffer.from(JSON.stringify({ __metadata__: { format: 'pt', note } }));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  return Buffer.concat([length, header]);
};

/** A PEFT adapter, as `tar -czf` makes its archive, for a model of `model()`'s base. */
function adapterArchive(note: string): Buffer {
  const dir = path.join(tempDir('adapter-'), 'my-adapter');
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({ base_model_name_or_path: 'Qwen/Qwen2.5-0.5B-Instruct', peft_type: 'LORA', r: 8, lora_alpha: 16, target_modules: ['q_proj'] }));
  fs.writeFileSync(path.join(dir, 'adapter_model.safetensors'), weights(note));
  const archive = path.join(path.dirname(dir), 'adapter.tar.gz');
  execFileSync('tar', ['-C', path.dirname(dir), '-czf', archive, 'my-adapter']);
  return fs.readFileSync(archive);
}

async function until(done: () => boolean, seconds = 2): Promise<void> {
  for (let i = 0; i < seconds * 100 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(done()).toBe(true);
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
    expect(backup).toEqual({ path: expect.any(String), bytes: expect.any(Number), held_ms: expect.any(Number), created_at: expect.any(String), adapters: 0, pruned: [] });
    expect(path.dirname(backup.path)).toBe(path.join(dataDir, 'backups'));
    expect(fs.readdirSync(backup.path).sort()).toEqual(['backup.json', 'pgdata']);
    const { rows: ids } = await sql<{ id: string }>`select id::text from trainyard_database`.execute(app.db);
    expect(JSON.parse(fs.readFileSync(path.join(backup.path, 'backup.json'), 'utf8'))).toEqual({
      database_id: ids[0].id,
      created_at: backup.created_at,
      data_dir: dataDir,
      adapters_dir: path.join(dataDir, 'adapters'),
    });
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
    const list = await app.inject({ method: 'GET', url: '/v1/admin/backups', headers: user.headers });
    expect([list.statusCode, list.json()]).toEqual([403, { detail: 'This route needs an admin key.' }]);
    expect(fs.existsSync(path.join(dataDir, 'backups'))).toBe(false);
  });

  it('saves the adapters of the imported checkpoints it holds, and restore puts them and the database back', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir();
    const adaptersDir = path.join(dataDir, 'adapters');
    const admin = await createUserWithKey(app, { isAdmin: true });
    const created = await app.inject({ method: 'POST', url: '/v1/preview/models', headers: admin.headers, payload: model(admin, 'imports') });
    const checkpoints = `/v1/preview/models/${created.json().id}/checkpoints`;
    const imported = async (note: string): Promise<string> => {
      const response = await app.inject({ method: 'POST', url: `${checkpoints}/import`, headers: { ...admin.headers, 'content-type': 'application/gzip' }, payload: adapterArchive(note) });
      expect(response.statusCode, response.body).toBe(200);
      return response.json().id;
    };
    const deleteStep = async (step: number, id: string) => {
      const response = await app.inject({ method: 'DELETE', url: checkpoints, headers: admin.headers, payload: { steps: [step] } });
      expect(response.json()).toMatchObject({ deleted_count: 1 });
      await until(() => !fs.existsSync(path.join(adaptersDir, id)));
    };
    const kept = await imported('step 1');
    const dropped = await imported('step 2');
    await deleteStep(2, dropped);

    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect(response.statusCode, response.body).toBe(201);
    const backup = response.json();
    expect(backup).toMatchObject({ adapters: 1, pruned: [] });
    const saved = path.join(backup.path, 'adapters', kept);
    expect(fs.readdirSync(path.join(backup.path, 'adapters'))).toEqual([kept]);
    expect(fs.readdirSync(saved).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    // Linked, not copied: the backup is on the adapters' file system.
    expect(fs.statSync(path.join(saved, 'adapter_model.safetensors')).ino).toBe(fs.statSync(path.join(adaptersDir, kept, 'adapter_model.safetensors')).ino);

    // Deleted after the backup: its files leave ADAPTERS_DIR, the backup's stay.
    await deleteStep(1, kept);
    expect(fs.readFileSync(path.join(saved, 'adapter_model.safetensors'))).toEqual(weights('step 1'));
    await app.close();

    const restored = await restoreEmbedded(backup.path, { dataDir, adaptersDir, now: new Date('2026-11-29T12:00:00Z') });
    expect(restored).toEqual({
      restored: backup.path,
      pgdata: path.join(dataDir, 'pgdata'),
      previous_pgdata: path.join(dataDir, 'pgdata.before-restore-2026-11-29T12-00-00-000Z'),
      adapters_restored: 1,
    });
    expect(fs.readFileSync(path.join(adaptersDir, kept, 'adapter_model.safetensors'))).toEqual(weights('step 1'));
    expect(fs.existsSync(path.join(adaptersDir, dropped))).toBe(false);
    const ids = async (pgdata: string) => {
      const db = await createPglite({ dataDir: pgdata });
      try {
        return (await db.query<{ id: string }>('select id from checkpoints order by step')).rows.map((row) => row.id);
      } finally {
        await db.close();
      }
    };
    expect(await ids(restored.pgdata)).toEqual([kept]);
    expect(await ids(restored.previous_pgdata!)).toEqual([]);
  });

  it('completes at the next start a restore killed once its copy was whole, and deletes a copy cut short', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir();
    const before = await createUserWithKey(app, { prefix: 'before' });
    const backup = await backupEmbedded(app.database, path.join(dataDir, 'backups'));
    const after = await createUserWithKey(app, { prefix: 'after' });
    await app.close();
    const pgdata = pgliteDataPath(dataDir);
    const usernames = async (found: App) => (await found.db.selectFrom('users').select('username').orderBy('username').execute()).map((row) => row.username);
    const start = async () => {
      const lines: Record<string, unknown>[] = [];
      const config = testConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'info' });
      const started = await buildApp(config, { database: await openDatabase(config), logStream: { write: (line: string) => void lines.push(JSON.parse(line)) } });
      return { app: started, warnings: () => lines.filter((line) => line.level === 40).map(({ msg, pgdata, previous_pgdata }) => ({ msg, pgdata, previous_pgdata })) };
    };

    // Killed while copying: the database in place serves on, the partial copy is deleted.
    fs.mkdirSync(`${pgdata}.restoring`);
    fs.writeFileSync(`${pgdata}.restoring/PG_VERSION`, '17\n');
    const copying = await start();
    expect(await usernames(copying.app)).toEqual([after.username, before.username]);
    expect(copying.warnings()).toEqual([]);
    await copying.app.close();
    expect(fs.existsSync(`${pgdata}.restoring`)).toBe(false);

    // Killed between its two renames: the database moved aside, the whole copy not yet in its place.
    fs.cpSync(path.join(backup.path, 'pgdata'), `${pgdata}.restored`, { recursive: true });
    const aside = `${pgdata}.before-restore-2026-11-30T00-00-00-000Z`;
    fs.renameSync(pgdata, aside);
    const completed = await start();
    expect(await usernames(completed.app)).toEqual([before.username]);
    expect(completed.warnings()).toEqual([{ msg: 'completed a restore that was interrupted once its copy of the backup was whole', pgdata, previous_pgdata: null }]);
    await completed.app.close();
    expect(fs.readdirSync(dataDir).filter((name) => name.startsWith('pgdata')).sort()).toEqual(['pgdata', path.basename(aside)]);

    // Killed before it moved the database aside: the next start moves it aside and puts the copy in its place.
    fs.rmSync(pgdata, { recursive: true });
    fs.renameSync(aside, pgdata);
    fs.cpSync(path.join(backup.path, 'pgdata'), `${pgdata}.restored`, { recursive: true });
    const moved = await start();
    expect(await usernames(moved.app)).toEqual([before.username]);
    const [warning] = moved.warnings();
    expect(warning.previous_pgdata).toMatch(new RegExp(`^${pgdata}\\.before-restore-\\d{4}-`));
    await moved.app.close();
    const db = await createPglite({ dataDir: warning.previous_pgdata as string });
    try {
      expect((await db.query<{ username: string }>('select username from users order by username')).rows.map((row) => row.username)).toEqual([after.username, before.username]);
    } finally {
      await db.close();
    }
  });

  it('keeps BACKUP_KEEP of this database\'s backups and deletes its copies cut short, leaving anything else alone', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir({ BACKUP_KEEP: '2' });
    const admin = await createUserWithKey(app, { isAdmin: true });
    const backupsDir = path.join(dataDir, 'backups');
    const { rows } = await sql<{ id: string }>`select id::text from trainyard_database`.execute(app.db);
    const put = (name: string, manifest: { database_id: string; data_dir: string } | undefined, database?: string) => {
      const dir = path.join(backupsDir, name);
      fs.mkdirSync(dir, { recursive: true });
      if (database) fs.mkdirSync(path.join(dir, database));
      if (manifest) fs.writeFileSync(path.join(dir, 'backup.json'), JSON.stringify({ ...manifest, created_at: '2020-01-01T00:00:00.000Z' }));
      return dir;
    };
    const ours = { database_id: rows[0].id, data_dir: dataDir };
    const otherDatabase = put('trainyard-2020-other-database', { ...ours, database_id: crypto.randomUUID() }, 'pgdata');
    const otherCutShort = put('trainyard-2020-other-cut-short', { ...ours, database_id: crypto.randomUUID() }, 'pgdata.partial');
    // A copy of this database restored into another data directory, backing up beside it.
    const otherDataDir = put('trainyard-2020-other-data-dir', { ...ours, data_dir: '/srv/trainyard' }, 'pgdata.partial');
    const noManifest = put('trainyard-2020-no-manifest', undefined, 'pgdata');
    const notOurs = put('elsewhere', ours, 'pgdata.partial');
    const cutShort = put('trainyard-2020-cut-short', ours, 'pgdata.partial');
    const cutBeforeCopying = put('trainyard-2020-cut-before-copying', ours);

    const take = async () => {
      const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
      expect(response.statusCode, response.body).toBe(201);
      return response.json() as { path: string; created_at: string; pruned: string[] };
    };
    const first = await take();
    expect(first.pruned).toEqual([cutBeforeCopying, cutShort]);
    const second = await take();
    expect(second.pruned).toEqual([]);
    const third = await take();
    expect(third.pruned).toEqual([first.path]);
    expect(fs.readdirSync(backupsDir).map((name) => path.join(backupsDir, name)).sort()).toEqual(
      [otherDatabase, otherCutShort, otherDataDir, noManifest, notOurs, second.path, third.path].sort(),
    );

    // Listed: this database's, newest first.
    const cutAgain = put('trainyard-2021-cut-short', ours, 'pgdata.partial');
    const listed = await app.inject({ method: 'GET', url: '/v1/admin/backups', headers: admin.headers });
    expect(listed.statusCode, listed.body).toBe(200);
    const entry = (backup: { path: string; created_at?: string }) => ({ path: backup.path, created_at: backup.created_at, bytes: expect.any(Number), adapters: 0 });
    expect(listed.json()).toEqual({
      unavailable: null,
      backup_dir: backupsDir,
      keep: 2,
      interval_hours: 0,
      next_due: null,
      data: [entry(third), entry(second)],
      has_more: false,
      cut_short: [cutAgain],
    });
    expect(listed.json().data[0].bytes).toBeGreaterThan(1_000_000);
    const one = await app.inject({ method: 'GET', url: '/v1/admin/backups?limit=1', headers: admin.headers });
    expect(one.json()).toMatchObject({ data: [entry(third)], has_more: true });
    const tooMany = await app.inject({ method: 'GET', url: '/v1/admin/backups?limit=1001', headers: admin.headers });
    expect([tooMany.statusCode, tooMany.json()]).toEqual([
      422,
      { detail: [{ type: 'less_than_equal', loc: ['query', 'limit'], msg: 'Input should be less than or equal to 1000', input: '1001', ctx: { le: 1000 } }] },
    ]);
  });

  it.runIf(fs.existsSync('/dev/shm') && fs.statSync('/dev/shm').dev !== fs.statSync(os.tmpdir()).dev)(
    'copies adapter files that cannot be linked, from another file system',
    async () => {
      const source = fs.mkdtempSync(path.join('/dev/shm', 'trainyard-adapter-'));
      cleanups.push(() => fs.rmSync(source, { recursive: true, force: true }));
      fs.mkdirSync(path.join(source, 'nested'));
      fs.writeFileSync(path.join(source, 'adapter_model.safetensors'), weights('elsewhere'));
      fs.writeFileSync(path.join(source, 'nested', 'tokenizer.json'), '{}');
      const target = path.join(tempDir('trainyard-saved-'), 'adapter');
      expect(await linkOrCopy(source, target)).toBe(true);
      expect(fs.readFileSync(path.join(target, 'adapter_model.safetensors'))).toEqual(weights('elsewhere'));
      expect(fs.readFileSync(path.join(target, 'nested', 'tokenizer.json'), 'utf8')).toBe('{}');
      expect(fs.statSync(path.join(target, 'adapter_model.safetensors')).dev).not.toBe(fs.statSync(path.join(source, 'adapter_model.safetensors')).dev);
      expect(await linkOrCopy(path.join(source, 'missing'), path.join(target, 'missing'))).toBe(false);
    },
  );

  it('takes one at start when none is newer than BACKUP_INTERVAL_HOURS, and the next an interval after the newest', { timeout: 90_000 }, async () => {
    const day = 24 * 3_600_000;
    const { app, dataDir } = await appOnDataDir({ BACKUP_INTERVAL_HOURS: '24' });
    const backupsDir = path.join(dataDir, 'backups');
    const taken = () => (fs.existsSync(backupsDir) ? fs.readdirSync(backupsDir).filter((name) => fs.existsSync(path.join(backupsDir, name, 'pgdata'))) : []);
    await until(() => taken().length === 1, 60);
    await app.backups.settled();
    const createdAt = Date.parse(JSON.parse(fs.readFileSync(path.join(backupsDir, taken()[0], 'backup.json'), 'utf8')).created_at);
    expect(app.backups.nextDue?.getTime()).toBe(createdAt + day);
    await app.close();
    expect(app.backups.nextDue).toBeUndefined();

    // Started again on the same directory: the backup just taken counts, so none is due before a day after it.
    const again = await appOnDataDir({ BACKUP_INTERVAL_HOURS: '24' }, dataDir);
    expect(again.app.backups.nextDue?.getTime()).toBe(createdAt + day);
    expect(taken()).toHaveLength(1);
    // A backup asked for counts too.
    const admin = await createUserWithKey(again.app, { isAdmin: true });
    const asked = await again.app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect(asked.statusCode, asked.body).toBe(201);
    expect(again.app.backups.nextDue?.getTime()).toBe(Date.parse(asked.json().created_at) + day);
    const listed = await again.app.inject({ method: 'GET', url: '/v1/admin/backups', headers: admin.headers });
    expect(listed.json()).toMatchObject({ interval_hours: 24, next_due: new Date(Date.parse(asked.json().created_at) + day).toISOString() });
    expect(listed.json().data.map((backup: { created_at: string }) => Date.parse(backup.created_at))).toEqual([Date.parse(asked.json().created_at), createdAt]);
  });

  it("refuses a BACKUP_DIR that leads into the database's own directory through a link, making nothing there", { timeout: 60_000 }, async () => {
    const dataDir = tempDir('trainyard-backup-');
    const link = path.join(tempDir('trainyard-links-'), 'into-pgdata');
    fs.symlinkSync(path.join(dataDir, 'pgdata'), link);
    const backupsDir = path.join(link, 'backups');
    const { app } = await appOnDataDir({ BACKUP_DIR: backupsDir }, dataDir);
    const admin = await createUserWithKey(app, { isAdmin: true });
    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect([response.statusCode, response.json()]).toEqual([
      409,
      { detail: `BACKUP_DIR=${backupsDir} leads into the database's own directory (${fs.realpathSync(path.join(dataDir, 'pgdata'))}): set BACKUP_DIR to a directory outside it.` },
    ]);
    expect(fs.existsSync(path.join(dataDir, 'pgdata', 'backups'))).toBe(false);
  });

  it('tries a scheduled backup that failed again after an hour, and logs both failures', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir();
    fs.writeFileSync(path.join(dataDir, 'a-file'), '');
    const backupsDir = path.join(dataDir, 'a-file', 'backups');
    const backups = new EmbeddedBackups(app.database, { backupsDir, adaptersDir: path.join(dataDir, 'adapters'), keep: 0, intervalMs: 24 * 3_600_000 });
    cleanups.push(() => backups.stopSchedule());
    const errors: string[] = [];
    const before = Date.now();
    await backups.schedule({ info: () => undefined, error: (_details, message) => errors.push(message) });
    await until(() => errors.length === 2, 30);
    const after = Date.now();
    expect(errors).toEqual(['could not read BACKUP_DIR for the newest backup', 'scheduled backup of the embedded database failed']);
    const retry = backups.nextDue!.getTime();
    expect(retry).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(retry).toBeLessThanOrEqual(after + 3_600_000);
  });

  it('waits past the 24.8 days a timer can hold in parts, taking no backup early', { timeout: 60_000 }, async () => {
    const { app, dataDir } = await appOnDataDir();
    const year = 8_760 * 3_600_000;
    const backupsDir = path.join(dataDir, 'backups');
    const backups = new EmbeddedBackups(app.database, { backupsDir, adaptersDir: path.join(dataDir, 'adapters'), keep: 0, intervalMs: year });
    cleanups.push(() => backups.stopSchedule());
    const taken = await backups.take();
    const longest = 2 ** 31 - 1; // setTimeout fires at once for more
    const timers = vi.spyOn(globalThis, 'setTimeout');
    try {
      await backups.schedule({ info: () => undefined, error: () => undefined });
      const due = Date.parse(taken.created_at) + year;
      expect(backups.nextDue?.getTime()).toBe(due);
      const planned = () => timers.mock.calls.filter(([, delay]) => delay === longest);
      expect(planned()).toHaveLength(1);
      // The part ends: the timer's callback finds the backup not yet due and waits another part.
      (planned()[0][0] as () => void)();
      await until(() => planned().length === 2);
      expect(backups.nextDue?.getTime()).toBe(due);
      await backups.settled();
      expect(fs.readdirSync(backupsDir)).toEqual([path.basename(taken.path)]);
    } finally {
      timers.mockRestore();
    }
  });

  it('schedules the next backup an interval after the newest, at once when that is older or there is none', () => {
    const now = new Date('2026-11-29T12:00:00Z');
    const hour = 3_600_000;
    expect(nextBackupDelay(undefined, 24 * hour, now)).toBe(0);
    expect(nextBackupDelay('2026-11-29T06:00:00.000Z', 24 * hour, now)).toBe(18 * hour);
    expect(nextBackupDelay('2026-11-27T12:00:00.000Z', 24 * hour, now)).toBe(0);
    // A backup from the future (the clock was set back) waits one interval, not more.
    expect(nextBackupDelay('2026-12-05T12:00:00.000Z', 24 * hour, now)).toBe(24 * hour);
  });

  it('restores only a whole backup, into the ADAPTERS_DIR its checkpoints name', async () => {
    const dataDir = tempDir('trainyard-restore-');
    const backups = tempDir('trainyard-backups-');
    const adaptersDir = path.join(dataDir, 'adapters');
    const cutShort = path.join(backups, 'cut-short');
    fs.mkdirSync(path.join(cutShort, 'pgdata.partial'), { recursive: true });
    const refused = (dir: string, message: string) => expect(restoreEmbedded(dir, { dataDir, adaptersDir })).rejects.toMatchObject({ name: 'ConflictError', message });
    await refused(cutShort, `${cutShort} is a backup that was cut short (it holds no whole pgdata): it cannot be restored; delete it.`);
    await refused(backups, `${backups} is not a trainyard backup: it holds no pgdata directory with a database in it.`);
    fs.mkdirSync(path.join(dataDir, 'pgdata'));
    fs.writeFileSync(path.join(dataDir, 'pgdata', 'PG_VERSION'), '17\n');
    await refused(dataDir, `${dataDir} is DATA_DIR itself: name a backup's directory (under BACKUP_DIR).`);
    const link = path.join(backups, 'link-to-data-dir');
    fs.symlinkSync(dataDir, link);
    await refused(link, `${link} is DATA_DIR itself: name a backup's directory (under BACKUP_DIR).`);
    await refused(path.join(dataDir, 'pgdata'), `${path.join(dataDir, 'pgdata')} is DATA_DIR's own database: name a backup's directory (under BACKUP_DIR).`);
    const whole = path.join(backups, 'whole');
    fs.mkdirSync(path.join(whole, 'pgdata'), { recursive: true });
    fs.writeFileSync(path.join(whole, 'pgdata', 'PG_VERSION'), '17\n');
    await refused(path.join(whole, 'pgdata'), `${path.join(whole, 'pgdata')} is a database directory: name the backup's directory, the one that holds it (${whole}).`);
    // A pgdata that holds no database, or is a link to one elsewhere, is no copy.
    const empty = path.join(backups, 'empty');
    fs.mkdirSync(path.join(empty, 'pgdata'), { recursive: true });
    await refused(empty, `${empty} is not a trainyard backup: it holds no pgdata directory with a database in it.`);
    const linked = path.join(backups, 'linked');
    const database = path.join(backups, 'some-database');
    fs.mkdirSync(database);
    fs.writeFileSync(path.join(database, 'PG_VERSION'), '17\n');
    fs.mkdirSync(linked);
    fs.symlinkSync(database, path.join(linked, 'pgdata'));
    await refused(linked, `${linked} is not a trainyard backup: it holds no pgdata directory with a database in it.`);
    const moved = path.join(backups, 'moved');
    fs.cpSync(database, path.join(moved, 'pgdata'), { recursive: true });
    fs.mkdirSync(path.join(moved, 'adapters', 'some-checkpoint'), { recursive: true });
    fs.writeFileSync(path.join(moved, 'backup.json'), JSON.stringify({ database_id: null, created_at: '2020-01-01T00:00:00.000Z', adapters_dir: '/srv/adapters' }));
    await refused(moved, `The backup's checkpoints name their adapters in /srv/adapters, and ADAPTERS_DIR is ${adaptersDir}: set ADAPTERS_DIR=/srv/adapters to restore it.`);
    // Refused, it changed nothing.
    expect(fs.readdirSync(dataDir)).toEqual(['pgdata']);
    expect(fs.readdirSync(path.join(dataDir, 'pgdata'))).toEqual(['PG_VERSION']);

    // The copy is opened before anything is put back: one that does not open (a PG_VERSION alone here) is
    // refused, its adapters not put back and the database in place kept.
    fs.mkdirSync(path.join(whole, 'adapters', 'some-checkpoint'), { recursive: true });
    fs.writeFileSync(path.join(whole, 'adapters', 'some-checkpoint', 'adapter_config.json'), '{}');
    await expect(restoreEmbedded(whole, { dataDir, adaptersDir })).rejects.toMatchObject({
      name: 'ConflictError',
      message: expect.stringMatching(new RegExp(`^${whole} cannot be restored: its database does not (open|answer) \\(.+\\)\\. Nothing was changed\\.$`)),
    });
    expect(fs.existsSync(adaptersDir)).toBe(false);
    expect(fs.readdirSync(dataDir)).toEqual(['pgdata']);
    expect(fs.readdirSync(path.join(dataDir, 'pgdata'))).toEqual(['PG_VERSION']);
    // Into a DATA_DIR that did not exist yet, the refusal leaves none behind (nor its lock file).
    const missing = path.join(`${dataDir}-not-yet`, 'data');
    await expect(restoreEmbedded(whole, { dataDir: missing, adaptersDir })).rejects.toMatchObject({ name: 'ConflictError' });
    expect(fs.existsSync(`${dataDir}-not-yet`)).toBe(false);
  });

  it('answers 409 for a database in memory, which has no files', async () => {
    const app = await createTestApp();
    cleanups.push(() => app.close());
    const admin = await createUserWithKey(app, { isAdmin: true });
    const response = await app.inject({ method: 'POST', url: '/v1/admin/backups', headers: admin.headers });
    expect([response.statusCode, response.json()]).toEqual([409, { detail: "This server's embedded database is in memory: there are no files to back up." }]);
    const list = await app.inject({ method: 'GET', url: '/v1/admin/backups', headers: admin.headers });
    expect([list.statusCode, list.json()]).toEqual([
      200,
      {
        unavailable: "This server's embedded database is in memory: there are no files to back up.",
        backup_dir: app.config.backupDir,
        keep: 0,
        interval_hours: 0,
        next_due: null,
        data: [],
        has_more: false,
        cut_short: [],
      },
    ]);
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
    const list = await app.inject({ method: 'GET', url: '/v1/admin/backups', headers: admin.headers });
    expect([list.statusCode, list.json()]).toMatchObject([
      200,
      { unavailable: "This server keeps its data on a PostgreSQL server (DATABASE_URL): back that up with pg_dump or the server's own tools.", data: [] },
    ]);
  });
});
