import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createPglite, pgliteDataPath, pgliteHandle, type Database, type DatabaseHandle } from '../../src/db/index.js';
import { analyzeStaleTables, EmbeddedStatistics } from '../../src/db/statistics.js';
import { testConfig } from '../helpers/app.js';
import { freshDatabase, onPostgresServer } from '../helpers/database.js';

const handles: DatabaseHandle[] = [];
const dataDirs: string[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0)) await handle.close();
  for (const dir of dataDirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

function tempDataDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-stats-'));
  dataDirs.push(dir);
  return dir;
}

/** A fresh embedded database; in `dataDir` (from the run's template, or as left there) when given. */
async function embedded(dataDir?: string): Promise<DatabaseHandle> {
  let handle: DatabaseHandle;
  if (dataDir === undefined) handle = await freshDatabase();
  else {
    const empty = !fs.existsSync(pgliteDataPath(dataDir));
    const loadDataDir = empty ? new Blob([fs.readFileSync(inject('pgliteTemplate'))]) : undefined;
    handle = pgliteHandle(await createPglite({ dataDir: pgliteDataPath(dataDir), loadDataDir }));
  }
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

// PostgreSQL servers keep their statistics with autovacuum; this is the embedded database's stand-in.
describe.skipIf(onPostgresServer)('planner statistics of the embedded database', () => {
  it('analyzes a table with rows that was never analyzed', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 1000);
    expect((await probeState(db)).reltuples).toBe(-1);

    expect(await analyzeStaleTables(db)).toContain('stats_probe');
    expect(await probeState(db)).toEqual({ reltuples: 1000, analyzeCount: 1 });
  });

  it('analyzes a table again only once more than 50 rows + 10% of its rows changed', async () => {
    const { db } = await embedded();
    await createProbe(db);
    await addRows(db, 1000);
    await analyzeStaleTables(db);

    await addRows(db, 100);
    await sql`update stats_probe set note = 'changed' where id <= 40`.execute(db);
    expect(await analyzeStaleTables(db)).not.toContain('stats_probe'); // 140 changed, threshold 150
    expect(await probeState(db)).toEqual({ reltuples: 1000, analyzeCount: 1 });

    await sql`delete from stats_probe where id > 1080`.execute(db);
    expect(await analyzeStaleTables(db)).toContain('stats_probe'); // and 20 deleted
    expect(await probeState(db)).toEqual({ reltuples: 1080, analyzeCount: 2 });
  });

  it('sees rows written before a restart, whose change counts PGlite does not keep', { timeout: 60_000 }, async () => {
    const dataDir = tempDataDir();
    const before = await embedded(dataDir);
    await createProbe(before.db);
    await addRows(before.db, 1000);
    await analyzeStaleTables(before.db);
    await addRows(before.db, 2000);
    await before.close();

    const { db } = await embedded(dataDir);
    const { rows } = await sql<{ modified: number }>`select n_mod_since_analyze::int as modified from pg_stat_user_tables where relname = 'stats_probe'`.execute(db);
    expect(Number(rows[0].modified)).toBe(0);
    expect(await analyzeStaleTables(db)).toContain('stats_probe');
    expect((await probeState(db)).reltuples).toBe(3000);
  });

  it('leaves a table that grew by less than the threshold before a restart', { timeout: 60_000 }, async () => {
    const dataDir = tempDataDir();
    const before = await embedded(dataDir);
    await createProbe(before.db);
    await addRows(before.db, 3000);
    await analyzeStaleTables(before.db);
    await addRows(before.db, 100); // threshold 350
    await before.close();

    const { db } = await embedded(dataDir);
    expect(await analyzeStaleTables(db)).not.toContain('stats_probe');
    expect((await probeState(db)).reltuples).toBe(3000);
  });

  it('analyzes stale tables when the app starts, after its migrations', async () => {
    const database = await freshDatabase();
    await createProbe(database.db);
    await addRows(database.db, 500);
    const app = await buildApp(testConfig(), { database });
    try {
      await app.ready();
      expect(await probeState(app.db)).toEqual({ reltuples: 500, analyzeCount: 1 });
    } finally {
      await app.close();
    }
  });

  it('logs a check that fails instead of throwing', async () => {
    const database = await freshDatabase();
    await sql`select 1`.execute(database.db); // a handle that never ran a query has nothing to close
    await database.close();
    const errors: string[] = [];
    const statistics = new EmbeddedStatistics(database.db, { info: () => undefined, error: (_details, message) => errors.push(message) }, 60_000);
    await statistics.start();
    await statistics.stop();
    expect(errors).toEqual(['updating the embedded database statistics (ANALYZE) failed']);
  });
});
