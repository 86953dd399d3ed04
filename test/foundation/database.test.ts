import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { migrateDownAll, migrateToLatest, openDatabase, type DatabaseHandle } from '../../src/db/index.js';
import { acquireDataDirLock, DataDirLockedError, lockFilePath } from '../../src/db/lock.js';
import { migrations } from '../../migrations/index.js';
import { createPgPool } from '../../src/db/index.js';
import { freshDatabase, onPostgresServer } from '../helpers/database.js';
import { adminPool, databaseUrl } from '../helpers/postgres.js';

const handles: DatabaseHandle[] = [];
afterEach(async () => {
  await Promise.all(handles.splice(0).map((h) => h.close()));
});

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

  it('return int8 and numeric values as numbers on either database', async () => {
    const handle = await freshDatabase();
    handles.push(handle);
    const { rows } = await sql<{ big: unknown; dec: unknown; n: unknown }>`
      select 9007199254740991::int8 as big, 12.5::numeric as dec, count(*) as n from entities`.execute(handle.db);
    expect(rows[0]).toEqual({ big: 9007199254740991, dec: 12.5, n: 0 });
  });
});

describe('the data directory lock', () => {
  const dataDirs: string[] = [];
  afterEach(() => {
    for (const dir of dataDirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
  });
  const tempDir = () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-lock-'));
    dataDirs.push(dir);
    return dir;
  };

  it('keeps a second opener out of a data directory in use', async () => {
    const dataDir = tempDir();
    const lock = acquireDataDirLock(dataDir);
    // Another live process holds it: pretend so by writing our parent's pid.
    fs.writeFileSync(lockFilePath(dataDir), String(process.ppid));
    try {
      expect(() => acquireDataDirLock(dataDir)).toThrow(DataDirLockedError);
      expect(() => acquireDataDirLock(dataDir)).toThrow(
        `The data directory ${dataDir} is in use by another trainyard process (pid ${process.ppid}).`,
      );
    } finally {
      fs.writeFileSync(lockFilePath(dataDir), String(process.pid));
      lock.release();
    }
    expect(fs.existsSync(lockFilePath(dataDir))).toBe(false);
  });

  it('takes over a lock left by a process that is gone', () => {
    const dataDir = tempDir();
    fs.writeFileSync(lockFilePath(dataDir), '2147483646');
    const lock = acquireDataDirLock(dataDir);
    expect(fs.readFileSync(lockFilePath(dataDir), 'utf8')).toBe(String(process.pid));
    lock.release();
  });

  it('is held while the embedded database is open and released when it closes', async () => {
    const dataDir = tempDir();
    const config = loadConfig({ DATA_DIR: dataDir });
    const handle = await openDatabase(config);
    expect(fs.readFileSync(lockFilePath(dataDir), 'utf8')).toBe(String(process.pid));
    await migrateToLatest(handle.db);
    await handle.close();
    expect(fs.existsSync(lockFilePath(dataDir))).toBe(false);
    // The data persists: reopening finds the schema.
    const again = await openDatabase(config);
    handles.push(again);
    expect(await tables(again)).toContain('api_keys');
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
