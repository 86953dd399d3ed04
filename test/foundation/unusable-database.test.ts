import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Migrator, sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { migrateToLatest, pgliteDataPath } from '../../src/db/index.js';
import { embeddedDatabaseIn, freshDatabase, onPostgresServer } from '../helpers/database.js';
import { startScript } from '../helpers/processes.js';

const NEWER = 'this database was migrated by a newer trainyard (0027_future is not a migration of this build): run that release, or restore a backup taken before the upgrade';

describe('a database migrated by a newer trainyard', () => {
  it('is refused by migrateToLatest with a StartError naming the migration, running nothing', async () => {
    const database = await freshDatabase();
    try {
      await sql`insert into kysely_migration (name, timestamp) values ('0027_future', now()::text)`.execute(database.db);
      await expect(database.unbounded(migrateToLatest)).rejects.toMatchObject({ name: 'NewerDatabaseError', message: NEWER });
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from kysely_migration`.execute(database.db);
      expect(rows[0].n).toBe(Object.keys(migrations).length + 1);
    } finally {
      await database.close();
    }
  }, 60_000);
});

/** Every file under `dir` with its size and modification time: what "left as it was" means here. */
function snapshot(dir: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    const stat = fs.statSync(file);
    files[path.relative(dir, file)] = `${stat.size} ${stat.mtimeMs}`;
  }
  return files;
}

/** The real CLI and server in child processes, as a newcomer runs them. */
describe.skipIf(onPostgresServer)('the CLI and the server on a database this build cannot use', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-unusable-'));
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) child.kill('SIGKILL');
    fs.rmSync(root, { recursive: true, force: true });
  });

  const start = (script: string, args: string[], dataDir: string) =>
    startScript(script, args, { ...process.env, DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'info', DATABASE_URL: '', BACKUP_DIR: path.join(root, 'backups') }, children);

  /** A data directory holding the build's database, migrated to `to` (the newest by default). */
  async function dataDirWith(name: string, to?: string, extra?: string): Promise<string> {
    const dataDir = path.join(root, name);
    fs.mkdirSync(dataDir, { recursive: true });
    const database = await embeddedDatabaseIn(dataDir);
    try {
      if (to !== undefined) {
        const { error } = await new Migrator({ db: database.db, provider: { getMigrations: async () => migrations } }).migrateTo(to);
        if (error) throw error;
      }
      if (extra !== undefined) await sql`insert into kysely_migration (name, timestamp) values (${extra}, now()::text)`.execute(database.db);
    } finally {
      await database.close();
    }
    return dataDir;
  }

  it('backs up a database older than migration 0023 as it is, with no database id', async () => {
    const dataDir = await dataDirWith('old', '0022_feedback_exact_numbers');
    const backup = start('src/cli/main.ts', ['backup'], dataDir);
    expect(await backup.exited).toBe(0);
    expect(backup.err()).toBe('');
    const made = JSON.parse(backup.out()) as { path: string };
    expect(JSON.parse(fs.readFileSync(path.join(made.path, 'backup.json'), 'utf8'))).toMatchObject({ database_id: null });
    expect(fs.existsSync(path.join(made.path, 'pgdata', 'PG_VERSION'))).toBe(true);
  }, 90_000);

  it('refuses backup and compact on a DATA_DIR with no database, creating nothing', async () => {
    const empty = path.join(root, 'mistyped');
    for (const command of ['backup', 'compact']) {
      const cli = start('src/cli/main.ts', [command], empty);
      expect(await cli.exited).toBe(1);
      expect(cli.err()).toBe(`DATA_DIR=${empty} holds no database (no ${path.join(empty, 'pgdata', 'PG_VERSION')}): ${command} works on an existing one; check DATA_DIR.\n`);
      expect(cli.out()).toBe('');
      expect(fs.existsSync(empty)).toBe(false);
    }
  }, 60_000);

  it('refuses to restore a backup whose database does not open, or that a newer trainyard migrated, leaving DATA_DIR as it was', async () => {
    const source = await dataDirWith('source');
    const backupsDir = path.join(root, 'backups');
    const corrupt = path.join(backupsDir, 'corrupt');
    fs.mkdirSync(corrupt, { recursive: true });
    fs.cpSync(pgliteDataPath(source), path.join(corrupt, 'pgdata'), { recursive: true });
    fs.truncateSync(path.join(corrupt, 'pgdata', 'base', '5', '1259'), 0); // pg_class emptied
    const future = path.join(backupsDir, 'future');
    fs.mkdirSync(future);
    fs.cpSync(pgliteDataPath(await dataDirWith('future-source', undefined, '0027_future')), path.join(future, 'pgdata'), { recursive: true });

    const target = await dataDirWith('target');
    const before = snapshot(pgliteDataPath(target));
    const cases = [
      [corrupt, /^its database does not (open|answer) \([^\n]+\)$/],
      [future, /^a newer trainyard migrated it \(0027_future is not a migration of this build\): restore it with that release$/],
    ] as const;
    for (const [backup, why] of cases) {
      const restore = start('src/cli/main.ts', ['restore', backup], target);
      expect(await restore.exited).toBe(1);
      expect(restore.out()).toBe('');
      const match = restore.err().match(/^(\S+) cannot be restored: (.*)\. Nothing was changed\.\n$/);
      expect(match?.[1]).toBe(backup);
      expect(match?.[2]).toMatch(why);
      expect(fs.readdirSync(target).filter((name) => name.startsWith('pgdata'))).toEqual(['pgdata']);
      expect(snapshot(pgliteDataPath(target))).toEqual(before);
    }
    // The database in place still serves.
    const users = start('src/cli/main.ts', ['users', 'list'], target);
    expect(await users.exited).toBe(0);
  }, 180_000);

  it('refuses to start the server or run the CLI on it, saying why without a stack', async () => {
    const dataDir = await dataDirWith('newer', undefined, '0027_future');
    const server = start('src/main.ts', [], dataDir);
    expect(await server.exited).toBe(1);
    expect(server.err()).toBe(`trainyard: failed to start: ${NEWER}\n`);
    const cli = start('src/cli/main.ts', ['users', 'list'], dataDir);
    expect(await cli.exited).toBe(1);
    expect(cli.err()).toBe(`${NEWER}\n`);
    expect(cli.out()).toBe('');
  }, 90_000);
});
