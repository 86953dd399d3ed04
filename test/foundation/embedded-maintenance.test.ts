import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import type { Database, DatabaseHandle } from '../../src/db/index.js';
import { compactDatabase, EmbeddedMaintenance, maintainTables, walSinceCheckpoint } from '../../src/db/maintenance.js';
import { testConfig } from '../helpers/app.js';
import { embeddedDatabaseIn, freshDatabase, onPostgresServer } from '../helpers/database.js';

const handles: DatabaseHandle[] = [];
const dataDirs: string[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0)) await handle.close();
  for (const dir of dataDirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

function tempDataDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-maintenance-'));
  dataDirs.push(dir);
  return dir;
}

/** A fresh embedded database; in `dataDir` (from the run's template, or as left there) when given. */
async function embedded(dataDir?: string): Promise<DatabaseHandle> {
  const handle = dataDir === undefined ? await freshDatabase() : await embeddedDatabaseIn(dataDir);
  handles.push(handle);
  return handle;
}

async function createProbe(db: Kysely<Database>): Promise<void> {
  await sql`create table stats_probe (id int primary key, note text)`.execute(db);
}

/** Adds `count` rows to stats_probe after those it has. */
async function addRows(db: Kysely<Database>, count: number): Promise<void> {
  await sql`insert into stats_probe select n, 'row ' || n from generate_series(
    (select coalesce(max(id), 0) + 1 from stats_probe), (select coalesce(max(id), 0) + ${count} from stats_probe)) n`.execute(db);
}

async function probeState(db: Kysely<Database>): Promise<{ reltuples: number; analyzeCount: number }> {
  await sql`select pg_stat_force_next_flush()`.execute(db);
  const { rows } = await sql<{ reltuples: number; analyze_count: number }>`select c.reltuples::float8 as reltuples, s.analyze_count::int as analyze_count
    from pg_class c join pg_stat_user_tables s on s.relid = c.oid where c.relname = 'stats_probe'`.execute(db);
  return { reltuples: Number(rows[0].reltuples), analyzeCount: Number(rows[0].analyze_count) };
}

/** stats_probe's heap pages, its dead rows as counted in this process, and its VACUUMs in this process. */
async function probeSpace(db: Kysely<Database>): Promise<{ pages: number; dead: number; vacuums: number }> {
  await sql`select pg_stat_force_next_flush()`.execute(db);
  const { rows } = await sql<{ pages: number; dead: number; vacuums: number }>`select
      (pg_relation_size('stats_probe') / current_setting('block_size')::int)::int as pages, n_dead_tup::int as dead, vacuum_count::int as vacuums
    from pg_stat_user_tables where relname = 'stats_probe'`.execute(db);
  return { pages: Number(rows[0].pages), dead: Number(rows[0].dead), vacuums: Number(rows[0].vacuums) };
}

/** How many transaction ids the database's oldest unfrozen row is behind, and the most any table's is. */
async function unfrozenAges(db: Kysely<Database>): Promise<{ database: number; oldestTable: number }> {
  const { rows } = await sql<{ database: number; oldest_table: number }>`select
      (select age(datfrozenxid) from pg_database where datname = current_database())::int as database,
      (select max(age(relfrozenxid)) from pg_class where relfrozenxid <> '0'::xid)::int as oldest_table`.execute(db);
  return { database: Number(rows[0].database), oldestTable: Number(rows[0].oldest_table) };
}

// PostgreSQL servers keep their statistics with autovacuum; this is the embedded database's stand-in.
describe.skipIf(onPostgresServer)('VACUUM and ANALYZE of the embedded database', () => {
  it('analyzes a table with rows that was never analyzed', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 1000);
    expect((await probeState(db)).reltuples).toBe(-1);

    expect((await maintainTables(db)).analyzed).toContain('stats_probe');
    expect(await probeState(db)).toEqual({ reltuples: 1000, analyzeCount: 1 });
  });

  it('analyzes a table again only once more than 50 rows + 10% of its rows changed', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 1000);
    await maintainTables(db);

    await addRows(db, 100);
    await sql`update stats_probe set note = 'changed' where id <= 40`.execute(db);
    expect((await maintainTables(db)).analyzed).not.toContain('stats_probe'); // 140 changed, threshold 150
    expect(await probeState(db)).toEqual({ reltuples: 1000, analyzeCount: 1 });

    await sql`delete from stats_probe where id > 1080`.execute(db);
    expect((await maintainTables(db)).analyzed).toContain('stats_probe'); // and 20 deleted
    expect(await probeState(db)).toEqual({ reltuples: 1080, analyzeCount: 2 });
  });

  it('sees rows written before a restart, whose change counts PGlite does not keep', { timeout: 60_000 }, async () => {
    const dataDir = tempDataDir();
    const before = await embedded(dataDir);
    await createProbe(before.db);
    await addRows(before.db, 1000);
    await maintainTables(before.db);
    await addRows(before.db, 2000);
    await before.close();

    const { db } = await embedded(dataDir);
    const { rows } = await sql<{ modified: number }>`select n_mod_since_analyze::int as modified from pg_stat_user_tables where relname = 'stats_probe'`.execute(db);
    expect(Number(rows[0].modified)).toBe(0);
    expect((await maintainTables(db)).analyzed).toContain('stats_probe');
    expect((await probeState(db)).reltuples).toBe(3000);
  });

  it('leaves a table that grew by less than the threshold before a restart', { timeout: 60_000 }, async () => {
    const dataDir = tempDataDir();
    const before = await embedded(dataDir);
    await createProbe(before.db);
    await addRows(before.db, 3000);
    await maintainTables(before.db);
    await addRows(before.db, 100); // threshold 350
    await before.close();

    const { db } = await embedded(dataDir);
    expect((await maintainTables(db)).analyzed).not.toContain('stats_probe');
    expect((await probeState(db)).analyzeCount).toBe(0);
  });

  it('vacuums a table once more than 50 rows + 20% of its rows are dead', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 1000);
    expect(await maintainTables(db)).toMatchObject({ vacuumed: expect.arrayContaining(['stats_probe']), analyzed: ['stats_probe'] });

    await sql`update stats_probe set note = 'changed' where id <= 240`.execute(db);
    expect((await maintainTables(db)).vacuumed).not.toContain('stats_probe'); // 240 dead, threshold 250
    expect(await probeSpace(db)).toMatchObject({ dead: 240, vacuums: 1 });

    await sql`delete from stats_probe where id > 980`.execute(db);
    expect((await maintainTables(db)).vacuumed).toContain('stats_probe');
    expect(await probeSpace(db)).toMatchObject({ dead: 0, vacuums: 2 });
  });

  it('vacuums a table once more than 1,000 rows + 20% of its rows were inserted since its last VACUUM', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 5000);
    await maintainTables(db);

    await addRows(db, 2000);
    // Not yet past 1,000 + 20% of 5,000; the ANALYZE it gets counts 7,000 rows: the threshold becomes 2,400.
    expect(await maintainTables(db)).toEqual({ vacuumed: [], analyzed: ['stats_probe'], froze: false, checkpointed: false });
    await addRows(db, 400);
    expect((await maintainTables(db)).vacuumed).not.toContain('stats_probe');
    await addRows(db, 1);
    expect((await maintainTables(db)).vacuumed).toContain('stats_probe');
  });

  it('uses the space of updated rows again, where without VACUUM the table grows with every update', { timeout: 60_000 }, async () => {
    async function pagesAfterUpdates(vacuum: boolean): Promise<number[]> {
      const { db } = await embedded();
      await createProbe(db);
      await addRows(db, 5000);
      await maintainTables(db, { analyzeOnly: !vacuum });
      const pages = [(await probeSpace(db)).pages];
      for (let round = 0; round < 6; round++) {
        await sql`update stats_probe set note = reverse(note)`.execute(db);
        await maintainTables(db, { analyzeOnly: !vacuum });
        pages.push((await probeSpace(db)).pages);
      }
      return pages;
    }
    const vacuumed = await pagesAfterUpdates(true);
    const unvacuumed = await pagesAfterUpdates(false);
    // Each round rewrites every row: a table twice its size holds the old and the new versions.
    expect(Math.max(...vacuumed)).toBeLessThanOrEqual(2 * vacuumed[0] + 2);
    expect(unvacuumed[6]).toBeGreaterThan(4 * unvacuumed[0]);
  });

  it('vacuums each table with rows once in a process, which settles rows deleted before a restart', { timeout: 60_000 }, async () => {
    const dataDir = tempDataDir();
    const before = await embedded(dataDir);
    await createProbe(before.db);
    await addRows(before.db, 30_000);
    await maintainTables(before.db);
    await sql`delete from stats_probe where id > 5000`.execute(before.db); // below the threshold of 6,050 that it is
    const pages = (await probeSpace(before.db)).pages;
    await before.close();

    const { db } = await embedded(dataDir);
    expect(await probeSpace(db)).toMatchObject({ dead: 0, vacuums: 0 }); // PGlite forgot the 25,000 deletes
    expect((await maintainTables(db)).vacuumed).toContain('stats_probe');
    expect((await probeState(db)).reltuples).toBe(5000);
    expect(await maintainTables(db)).toEqual({ vacuumed: [], analyzed: [], froze: false, checkpointed: false });
    await addRows(db, 20_000);
    expect((await probeSpace(db)).pages).toBeLessThanOrEqual(pages); // in the space the deleted rows left
  });

  it('vacuums a table whose large values are rewritten, whose dead versions are in its TOAST table only', { timeout: 60_000 }, async () => {
    const { db } = await embedded();
    await sql`create table toast_probe (id int primary key, summary text)`.execute(db);
    await sql`insert into toast_probe select n, 'small' from generate_series(1, 200) n`.execute(db);
    await maintainTables(db);
    // A run's summary of about 100 kB rewritten on every flush: the row stays small, its value moves to TOAST.
    for (let flush = 0; flush < 40; flush++) {
      await sql`update toast_probe set summary = (select string_agg(md5(g::text || ${flush}::int), '') from generate_series(1, 3200) g) where id = 1`.execute(db);
    }
    await sql`select pg_stat_force_next_flush()`.execute(db);
    const { rows } = await sql<{ dead: number; toast_dead: number }>`select pg_stat_get_dead_tuples(c.oid)::int as dead,
      pg_stat_get_dead_tuples(c.reltoastrelid)::int as toast_dead from pg_class c where c.relname = 'toast_probe'`.execute(db);
    expect(Number(rows[0].dead)).toBeLessThanOrEqual(90); // within the table's own threshold of 90
    expect(Number(rows[0].toast_dead)).toBeGreaterThan(50); // past its TOAST table's

    expect((await maintainTables(db)).vacuumed).toContain('toast_probe');
    await sql`select pg_stat_force_next_flush()`.execute(db);
    const after = await sql<{ toast_dead: number }>`select pg_stat_get_dead_tuples(c.reltoastrelid)::int as toast_dead from pg_class c where c.relname = 'toast_probe'`.execute(db);
    expect(Number(after.rows[0].toast_dead)).toBe(0);
  });

  it('freezes the whole database, catalogs included, once its oldest unfrozen row passes the freeze limit', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 100);
    for (let i = 0; i < 20; i++) await sql`update stats_probe set note = 'again' where id = 1`.execute(db);
    const before = await unfrozenAges(db);
    expect(before.database).toBeGreaterThan(20);

    const limits = { xidAge: before.database + 5, multixactAge: 400_000_000 };
    expect((await maintainTables(db, { freezeLimits: limits })).froze).toBe(false);
    for (let i = 0; i < 10; i++) await sql`update stats_probe set note = 'again' where id = 1`.execute(db);
    expect((await maintainTables(db, { freezeLimits: limits })).froze).toBe(true);
    const after = await unfrozenAges(db);
    expect(after.database).toBeLessThan(5);
    expect(after.oldestTable).toBeLessThan(5);
  });

  it('checkpoints once more write-ahead log than its threshold was written since the last checkpoint', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await sql`checkpoint`.execute(db);
    await addRows(db, 20_000);
    await maintainTables(db, { checkpointWalBytes: Number.MAX_SAFE_INTEGER }); // its VACUUM and ANALYZE write log too
    const written = await walSinceCheckpoint(db);
    expect(written).toBeGreaterThan(1_000_000);

    expect((await maintainTables(db, { checkpointWalBytes: written + 100_000 })).checkpointed).toBe(false);
    expect((await maintainTables(db, { checkpointWalBytes: written - 1 })).checkpointed).toBe(true);
    expect(await walSinceCheckpoint(db)).toBeLessThan(8192); // the checkpoint's own record
  });

  it('compacts: the files shrink to the rows a delete left, where VACUUM only makes the space usable again', { timeout: 60_000 }, async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 100_000);
    const full = (await probeSpace(db)).pages;
    await sql`delete from stats_probe where id % 10 <> 0`.execute(db);
    await maintainTables(db);
    const vacuumed = (await probeSpace(db)).pages;
    expect(vacuumed).toBe(full); // every page keeps a row: none is cut off the end

    const { database_bytes_before: before, database_bytes_after: after } = await compactDatabase(db);
    const compacted = (await probeSpace(db)).pages;
    expect(compacted).toBeLessThan(vacuumed / 5);
    expect(before - after).toBeGreaterThan((vacuumed - compacted) * 8192 * 0.9); // the table's pages and its index's
    expect(await sql`select count(*)::int as rows from stats_probe`.execute(db)).toMatchObject({ rows: [{ rows: 10_000 }] });
  });

  it('vacuums and analyzes tables when the app starts, after its migrations', async () => {
    const database = await freshDatabase();
    await createProbe(database.db);
    await addRows(database.db, 500);
    const app = await buildApp(testConfig(), { database });
    try {
      await app.ready();
      expect(await probeState(app.db)).toEqual({ reltuples: 500, analyzeCount: 1 });
      expect(await probeSpace(app.db)).toMatchObject({ vacuums: 1 });
    } finally {
      await app.close();
    }
  });

  it('says so when the first check of a start, which the server waits for, takes long', async () => {
    const { db } = await embedded();
    const said: [Record<string, unknown>, string][] = [];
    const log = { info: (details: Record<string, unknown>, message: string) => said.push([details, message]), error: () => undefined };
    const quick = new EmbeddedMaintenance(db, log, 60_000, 60_000);
    await quick.start();
    await quick.stop();
    expect(said.filter(([, message]) => message.startsWith('maintaining the embedded database before listening'))).toEqual([]);
    const slow = new EmbeddedMaintenance(db, log, 60_000, 0); // every check takes longer than no time
    await slow.start();
    await slow.stop();
    expect(said).toContainEqual([
      { after_ms: 0 },
      'maintaining the embedded database before listening: the first check of a start vacuums every table, about 3 s a GB for a database never vacuumed',
    ]);
  });

  it('logs a check that fails instead of throwing', async () => {
    const database = await freshDatabase();
    await sql`select 1`.execute(database.db); // a handle that never ran a query has nothing to close
    await database.close();
    const errors: string[] = [];
    const maintenance = new EmbeddedMaintenance(database.db, { info: () => undefined, error: (_details, message) => errors.push(message) }, 60_000);
    await maintenance.start();
    await maintenance.stop();
    expect(errors).toEqual(['maintaining the embedded database (VACUUM, ANALYZE, CHECKPOINT) failed']);
  });
});
