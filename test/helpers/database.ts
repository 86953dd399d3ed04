import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { sql, type Kysely } from 'kysely';
import { inject } from 'vitest';
import { createPglite, createPgPool, pgliteDataPath, pgliteHandle, postgresHandle, type DatabaseHandle } from '../../src/db/index.js';
import { adminPool, databaseUrl, TEST_DATABASE_URL } from './postgres.js';

export const onPostgresServer = Boolean(TEST_DATABASE_URL);

/**
 * A fresh, migrated database for one test: PGlite loaded from the run's template dump, or (with
 * TEST_DATABASE_URL) a server database copied from the run's template and dropped when closed.
 */
export async function freshDatabase(): Promise<DatabaseHandle> {
  if (TEST_DATABASE_URL) {
    const template = inject('pgTemplate');
    const name = `${template.replace('tpl', 't')}_${randomBytes(4).toString('hex')}`;
    const admin = adminPool();
    try {
      await admin.query(`create database ${name} template ${template}`);
    } finally {
      await admin.end();
    }
    const handle = postgresHandle(createPgPool(databaseUrl(name), 5));
    return {
      ...handle,
      async close() {
        await handle.close();
        const drop = adminPool();
        try {
          await drop.query(`drop database if exists ${name} with (force)`);
        } finally {
          await drop.end();
        }
      },
    };
  }
  const dump = fs.readFileSync(inject('pgliteTemplate'));
  return pgliteHandle(await createPglite({ loadDataDir: new Blob([dump]) }));
}

/**
 * The embedded database kept in files in `dataDir`, as a server keeps it (backups need its files): started
 * from the run's template when the directory holds none yet, else opened as it is.
 */
export async function embeddedDatabaseIn(dataDir: string): Promise<DatabaseHandle> {
  const loadDataDir = fs.existsSync(pgliteDataPath(dataDir)) ? undefined : new Blob([fs.readFileSync(inject('pgliteTemplate'))]);
  return pgliteHandle(await createPglite({ dataDir: pgliteDataPath(dataDir), loadDataDir }), { dataDir });
}

/**
 * On a PostgreSQL server: whether a request now waits for a row lock another transaction of the test
 * holds ('blocked'), or finished first ('settled'); polled for up to 5 s.
 */
export async function blockedOrSettled(db: Kysely<any>, request: Promise<unknown>): Promise<'blocked' | 'settled'> {
  let settled = false;
  void request.finally(() => (settled = true));
  for (let i = 0; i < 200; i++) {
    if (settled) return 'settled';
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
    if (rows[0].n > 0) return 'blocked';
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error('the request neither finished nor waited for a lock');
}
