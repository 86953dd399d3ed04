import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { createPglite, migrateToLatest, pgliteHandle, postgresHandle, createPgPool } from '../../src/db/index.js';
import { maintainTables } from '../../src/db/maintenance.js';
import { adminPool, databaseUrl, TEST_DATABASE_URL } from './postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** File holding a dump of a migrated PGlite database; each test database starts from it. */
    pgliteTemplate: string;
    /** With TEST_DATABASE_URL: the migrated template database each test database is copied from. */
    pgTemplate: string;
  }
}

/**
 * Migrates one database per run and hands it to the test files as a template: a fresh PGlite costs
 * about 2 s, one loaded from a dump a fraction of that, and a server database copied from a template
 * is a single CREATE DATABASE.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (TEST_DATABASE_URL) {
    const name = `trainyard_tpl_${randomBytes(4).toString('hex')}`;
    const admin = adminPool();
    await admin.query(`create database ${name}`);
    const handle = postgresHandle(createPgPool(databaseUrl(name), 2));
    await migrateToLatest(handle.db);
    await handle.close();
    project.provide('pgTemplate', name);
    project.provide('pgliteTemplate', '');
    return async () => {
      const leftovers = await admin.query<{ datname: string }>(
        `select datname from pg_database where datname like $1`,
        [`${name.replace('tpl', 't')}%`],
      );
      for (const { datname } of leftovers.rows) await admin.query(`drop database if exists ${datname} with (force)`);
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    };
  }

  const pglite = await createPglite();
  const handle = pgliteHandle(pglite);
  await migrateToLatest(handle.db);
  // As the app's first start would (src/db/maintenance.ts): test apps then start with nothing to do.
  await maintainTables(handle.db);
  const dump = await pglite.dumpDataDir();
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-test-')), 'template.tar');
  fs.writeFileSync(file, Buffer.from(await dump.arrayBuffer()));
  await handle.close();
  project.provide('pgliteTemplate', file);
  project.provide('pgTemplate', '');
  return async () => fs.rmSync(path.dirname(file), { recursive: true, force: true });
}
