import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Migrator, sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { migrateDownAll, migrateToLatest, openDatabase, type DatabaseHandle } from '../../src/db/index.js';
import { acquireDataDirLock, DataDirLockedError, lockFilePath } from '../../src/db/lock.js';
import { migrations } from '../../migrations/index.js';
import { createPglite, createPgPool, pgliteDataPath } from '../../src/db/index.js';
import { initdbTemplatePath, writeInitdbTemplate } from '../../src/db/pglite-template.js';
import { pgliteVersion } from '../../src/db/pglite-worker.js';
import { freshDatabase, onPostgresServer } from '../helpers/database.js';
import { inject } from 'vitest';
import { adminPool, databaseUrl } from '../helpers/postgres.js';

const handles: DatabaseHandle[] = [];
const tempDirs: string[] = [];
afterEach(async () => {
  await Promise.all(handles.splice(0).map((h) => h.close()));
  for (const dir of tempDirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-database-'));
  tempDirs.push(dir);
  return dir;
}

async function tables(handle: DatabaseHandle): Promise<string[]> {
  const { rows } = await sql<{ table_name: string }>`
    select table_name from information_schema.tables
    where table_schema = 'public' and table_name not like 'kysely_%' order by table_name`.execute(handle.db);
  return rows.map((r) => r.table_name);
}

describe('migrations', () => {
  it('bring a fresh database to the latest schema and run again as a no-op', async () => {
    const handle = await freshDatabase();
    handles.push(handle);
    expect(await tables(handle)).toEqual(expect.arrayContaining(['api_keys', 'entities', 'memberships', 'users']));
    expect(await migrateToLatest(handle.db)).toEqual([]);
  });

  it('all revert with their down steps and apply again', async () => {
    const handle = await freshDatabase();
    handles.push(handle);
    await migrateDownAll(handle.db);
    expect(await tables(handle)).toEqual([]);
    const applied = await migrateToLatest(handle.db);
    expect(applied.map((r) => r.migrationName)).toEqual(Object.keys(migrations));
    expect(applied.every((r) => r.status === 'Success')).toBe(true);
  });

  it('apply the ones a database lacks when all the others are there', async () => {
    const handle = await freshDatabase();
    handles.push(handle);
    const newest = Object.keys(migrations).at(-1);
    const { error } = await new Migrator({ db: handle.db, provider: { getMigrations: async () => migrations } }).migrateDown();
    expect(error).toBeUndefined();
    const applied = await migrateToLatest(handle.db);
    expect(applied.map((r) => [r.migrationName, r.status])).toEqual([[newest, 'Success']]);
    expect(await migrateToLatest(handle.db)).toEqual([]);
  });

  it('return int8 and numeric values as numbers on either database', async () => {
    const handle = await freshDatabase();
    handles.push(handle);
    const { rows } = await sql<{ big: unknown; dec: unknown; n: unknown }>`
      select 9007199254740991::int8 as big, 12.5::numeric as dec, count(*) as n from entities`.execute(handle.db);
    expect(rows[0]).toEqual({ big: 9007199254740991, dec: 12.5, n: 0 });
  });
});

describe('the data directory lock', () => {
  /** The file holds `<pid> <network namespace>` (test/foundation/data-dir-lock.test.ts has the rest). */
  const lockFilePid = (dataDir: string) => Number(fs.readFileSync(lockFilePath(dataDir), 'utf8').split(' ')[0]);

  it('keeps a second opener out of a data directory in use', async () => {
    const dataDir = tempDir();
    const lock = await acquireDataDirLock(dataDir);
    const line = fs.readFileSync(lockFilePath(dataDir), 'utf8');
    // This process holds the directory (on Linux its socket refuses the second opener); the message names the
    // pid in the lock file, here one another process is made to seem to have written.
    fs.writeFileSync(lockFilePath(dataDir), String(process.ppid));
    try {
      await expect(acquireDataDirLock(dataDir)).rejects.toThrow(DataDirLockedError);
      await expect(acquireDataDirLock(dataDir)).rejects.toThrow(
        `The data directory ${dataDir} is in use by another trainyard process (pid ${process.ppid}; lock file ${lockFilePath(dataDir)}).`,
      );
    } finally {
      fs.writeFileSync(lockFilePath(dataDir), line);
      lock.release();
    }
    expect(fs.existsSync(lockFilePath(dataDir))).toBe(false);
  });

  it('takes over a lock left by a process that is gone', async () => {
    const dataDir = tempDir();
    fs.writeFileSync(lockFilePath(dataDir), '2147483646');
    const lock = await acquireDataDirLock(dataDir);
    expect(lockFilePid(dataDir)).toBe(process.pid);
    lock.release();
  });

  it('is held while the embedded database is open and released when it closes', async () => {
    const dataDir = tempDir();
    const config = loadConfig({ DATA_DIR: dataDir });
    const handle = await openDatabase(config);
    expect(lockFilePid(dataDir)).toBe(process.pid);
    await migrateToLatest(handle.db);
    await handle.close();
    expect(fs.existsSync(lockFilePath(dataDir))).toBe(false);
    // The data persists: reopening finds the schema.
    const again = await openDatabase(config);
    handles.push(again);
    expect(await tables(again)).toContain('api_keys');
  });
});

// Embedded only: the PostgreSQL run skips them.
describe.skipIf(onPostgresServer)('a first start on an empty data directory', () => {

  /** A template that says it was loaded: the test run's migrated database with a table of its own. */
  async function markedTemplate(): Promise<string> {
    const pglite = await createPglite({ loadDataDir: new Blob([fs.readFileSync(inject('pgliteTemplate'))]) });
    try {
      await pglite.query('create table came_from_the_template (id int)');
      await pglite.query('checkpoint');
      const file = path.join(tempDir(), 'template.tar.gz');
      fs.writeFileSync(file, Buffer.from(await (await pglite.dumpDataDir('gzip')).arrayBuffer()));
      return file;
    } finally {
      await pglite.close();
    }
  }

  it('starts from the template, and a later start opens the database there instead', async () => {
    const initdbTemplate = await markedTemplate();
    const config = loadConfig({ DATA_DIR: tempDir() });
    const first = await openDatabase(config, { initdbTemplate });
    expect(await migrateToLatest(first.db)).toEqual([]);
    await sql`insert into came_from_the_template values (1)`.execute(first.db);
    await first.close();

    const again = await openDatabase(config, { initdbTemplate });
    handles.push(again);
    const { rows } = await sql<{ id: number }>`select id from came_from_the_template`.execute(again.db);
    expect(rows).toEqual([{ id: 1 }]);
  });

  it('makes the database again when a start was cut short while making it', async () => {
    const initdbTemplate = await markedTemplate();
    const config = loadConfig({ DATA_DIR: tempDir() });
    const pgdata = pgliteDataPath(config.dataDir);
    // What a kill leaves partway through the unpack: PG_VERSION, but not yet pg_hba.conf and the rest.
    fs.mkdirSync(pgdata, { recursive: true });
    fs.writeFileSync(path.join(pgdata, 'PG_VERSION'), '17\n');
    fs.writeFileSync(`${pgdata}.creating`, '');
    const handle = await openDatabase(config, { initdbTemplate });
    handles.push(handle);
    expect(await sql`select * from came_from_the_template`.execute(handle.db)).toMatchObject({ rows: [] });
    expect(fs.existsSync(`${pgdata}.creating`)).toBe(false);
    expect(fs.existsSync(path.join(pgdata, 'pg_hba.conf'))).toBe(true);
  });

  it('says why when the database there cannot be opened', async () => {
    const initdbTemplate = await markedTemplate();
    const config = loadConfig({ DATA_DIR: tempDir() });
    await (await openDatabase(config, { initdbTemplate })).close();
    // As an unpack an older release was cut short in leaves it (no marker): PGlite exits, and says so.
    for (const file of ['pg_hba.conf', 'pg_ident.conf']) fs.rmSync(path.join(pgliteDataPath(config.dataDir), file));
    await expect(openDatabase(config, { initdbTemplate })).rejects.toThrow(/^Program terminated with exit\(1\)$/);
  });

  it('runs initdb when there is no template', async () => {
    const config = loadConfig({ DATA_DIR: tempDir() });
    const handle = await openDatabase(config, { initdbTemplate: path.join(tempDir(), 'none.tar.gz') });
    handles.push(handle);
    expect(fs.existsSync(path.join(pgliteDataPath(config.dataDir), 'PG_VERSION'))).toBe(true);
    expect((await migrateToLatest(handle.db)).map((r) => r.migrationName)).toEqual(Object.keys(migrations));
  });

  it("uses the build's template, written once per PGlite release, from which every migration runs", async () => {
    const dir = tempDir();
    fs.writeFileSync(path.join(dir, '0.0.1.tar.gz'), 'a template of an older release');
    const file = initdbTemplatePath(dir);
    expect(path.basename(file)).toBe(`${pgliteVersion()}.tar.gz`);
    expect(await writeInitdbTemplate(file)).toBe(true);
    expect(fs.readdirSync(dir)).toEqual([path.basename(file)]);
    expect(await writeInitdbTemplate(file)).toBe(false);

    const handle = await openDatabase(loadConfig({ DATA_DIR: tempDir() }), { initdbTemplate: file });
    handles.push(handle);
    expect((await migrateToLatest(handle.db)).map((r) => r.migrationName)).toEqual(Object.keys(migrations));
  });
});

describe.skipIf(!onPostgresServer)('the PostgreSQL pool', () => {
  it('survives the server ending an idle connection, and serves the next query on a new one', async () => {
    const name = `trainyard_pooltest_${process.pid}_${Date.now()}`;
    const admin = adminPool();
    await admin.query(`create database ${name}`);
    const pool = createPgPool(databaseUrl(name), 1);
    try {
      const { rows } = await pool.query<{ pid: number }>('select pg_backend_pid() as pid');
      await admin.query('select pg_terminate_backend($1)', [rows[0].pid]);
      await new Promise((resolve) => setTimeout(resolve, 200)); // the idle client sees the disconnect
      const again = await pool.query<{ pid: number }>('select pg_backend_pid() as pid');
      expect(again.rows[0].pid).not.toBe(rows[0].pid);
    } finally {
      await pool.end();
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    }
  });
});
