import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { AuthService } from '../auth/service.js';
import { ConfigError, loadConfig, StartError, type Config } from '../config.js';
import { backupEmbedded, restoreEmbedded } from '../db/backup.js';
import { migrateToLatest, openDatabase, pgliteDataPath, type DatabaseHandle } from '../db/index.js';
import { DataDirLockedError, lockHolder } from '../db/lock.js';
import { compactDatabase } from '../db/maintenance.js';
import { AppError } from '../errors.js';
import { recordedServerUrl } from '../server-address.js';
import { directClient, HttpAdminError, httpBackup, httpClient, type AdminClient } from './admin-client.js';

const USAGE = `Usage: npm run cli -- <command>

  migrate                                   run database migrations
  backup                                    copy the embedded database, consistent, and its imported
                                            adapters into a new directory under BACKUP_DIR (the
                                            server may be running)
  restore <backup-dir>                      put a backup back in DATA_DIR (the database there is
                                            moved aside) and ADAPTERS_DIR; the server must be stopped
  compact                                   shrink the embedded database's files to its data
                                            (VACUUM FULL); the server must be stopped
  users create <username> [--admin]         create a user (and the user's own entity)
  users list
  teams create <name>                       create a team entity
  teams list                                every team with its members
  teams add-member <team> <username> [--role admin|member]
  teams remove-member <team> <username>     the user's keys and workers stop reaching the team
  keys create <username> [--name NAME] [--kind user|worker]
                                            create an API key; the key is printed once. A worker
                                            key runs the jobs of the user's entities (an admin's: all)
  keys list [--user USERNAME]
  keys revoke <key-id>

With DATABASE_URL set the CLI uses that server. Otherwise it opens the embedded database in DATA_DIR,
or, when a running trainyard holds it, calls that server's admin API (TRAINYARD_URL, by default the
address that server recorded in DATA_DIR/server-url, else http://HOST:PORT; with TRAINYARD_ADMIN_KEY or
the key in DATA_DIR/admin-api-key).`;

class UsageError extends Error {}
/** A command that cannot run in this state (exit 1). */
class RefusedError extends Error {}

function adminKey(config: Config): string {
  if (config.cliAdminKey) return config.cliAdminKey;
  const file = path.join(config.dataDir, 'admin-api-key');
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    throw new UsageError(`A server holds ${config.dataDir}; set TRAINYARD_ADMIN_KEY to an admin key (no ${file} to read).`);
  }
}

/** The command line, parsed; an unknown option or a missing value is a usage error, not a crash. */
function parseCommandLine(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        admin: { type: 'boolean', default: false },
        role: { type: 'string', default: 'member' },
        name: { type: 'string' },
        kind: { type: 'string', default: 'user' },
        user: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS_')) throw new UsageError(`${(error as Error).message}\n\n${USAGE}`);
    throw error;
  }
}

async function run({ values, positionals }: ReturnType<typeof parseCommandLine>, config: Config): Promise<unknown> {
  const [group, action, ...args] = positionals;
  if (!group) throw new UsageError(USAGE);
  const need = (count: number) => {
    if (args.length !== count) throw new UsageError(USAGE);
    return args;
  };
  if (values.role !== 'admin' && values.role !== 'member') throw new UsageError('--role must be admin or member');
  if (values.kind !== 'user' && values.kind !== 'worker') throw new UsageError('--kind must be user or worker');
  const role = values.role;
  const kind = values.kind;

  const holder = config.databaseUrl ? undefined : await lockHolder(config.dataDir);
  if (group === 'migrate') {
    if (action !== undefined) throw new UsageError(USAGE);
    if (holder !== undefined) return { migrated: [], note: `the server (pid ${holder.pid ?? 'unknown'}) holding ${config.dataDir} migrated it at start` };
    return withDatabase(config, async () => undefined, true);
  }

  if (group === 'backup') {
    if (action !== undefined) throw new UsageError(USAGE);
    if (config.databaseUrl) throw new RefusedError("backup copies the embedded database in DATA_DIR; back up a PostgreSQL server with pg_dump or the server's own tools.");
    if (holder !== undefined) return httpBackup(serverUrl(config), adminKey(config));
    return onDataDir(config, 'backup', (database) => backupEmbedded(database, config.backupDir, { adaptersDir: config.adaptersDir, keep: config.backupKeep }));
  }

  if (group === 'restore') {
    if (action === undefined || args.length > 0) throw new UsageError(USAGE);
    if (config.databaseUrl) throw new RefusedError('restore puts back a backup of the embedded database in DATA_DIR; DATABASE_URL names a PostgreSQL server.');
    if (holder !== undefined) {
      throw new RefusedError(`A running trainyard (pid ${holder.pid ?? 'unknown'}) holds ${config.dataDir}. Stop it first: restore replaces its database.`);
    }
    return restoreEmbedded(action, { dataDir: config.dataDir, adaptersDir: config.adaptersDir });
  }

  if (group === 'compact') {
    if (action !== undefined) throw new UsageError(USAGE);
    if (config.databaseUrl) throw new RefusedError('compact rewrites the embedded database in DATA_DIR; on a PostgreSQL server run VACUUM FULL there.');
    if (holder !== undefined) {
      throw new RefusedError(
        `A running trainyard (pid ${holder.pid ?? 'unknown'}) holds ${config.dataDir}. Stop it first: compact rewrites every table and holds the database until it is done.`,
      );
    }
    return onDataDir(config, 'compact', (database) => compactDatabase(database.db));
  }

  const command = async (client: AdminClient): Promise<unknown> => {
    switch (`${group} ${action ?? ''}`) {
      case 'users create':
        return client.createUser(need(1)[0], values.admin);
      case 'users list':
        need(0);
        return client.listUsers();
      case 'teams create':
        return client.createTeam(need(1)[0]);
      case 'teams list':
        need(0);
        return client.listTeams();
      case 'teams add-member': {
        const [team, username] = need(2);
        return client.addMember(team, username, role);
      }
      case 'teams remove-member': {
        const [team, username] = need(2);
        return client.removeMember(team, username);
      }
      case 'keys create':
        return client.createKey(need(1)[0], values.name, kind);
      case 'keys list':
        need(0);
        return client.listKeys(values.user);
      case 'keys revoke':
        return client.revokeKey(need(1)[0]);
      default:
        throw new UsageError(USAGE);
    }
  };
  if (holder !== undefined) return command(httpClient(serverUrl(config), adminKey(config)));
  return withDatabase(config, (auth) => command(directClient(auth)), false);
}

/** The server holding DATA_DIR: TRAINYARD_URL, else the address it recorded there, else http://HOST:PORT. */
function serverUrl(config: Config): string {
  return (config.cliServerUrlSet ? undefined : recordedServerUrl(config.dataDir)) ?? config.cliServerUrl;
}

/** The database, saying on stderr when opening it completed an interrupted restore (src/db/backup.ts). */
async function open(config: Config): Promise<DatabaseHandle> {
  const database = await openDatabase(config);
  if (database.restoreCompleted) {
    const previous = database.restoreCompleted.previous_pgdata;
    process.stderr.write(`trainyard: completed a restore that was interrupted once its copy of the backup was whole${previous ? ` (the database it replaced: ${previous})` : ''}\n`);
  }
  return database;
}

/**
 * With no server running, on the directory as it is: not migrated first, so that a backup or compact
 * run by a newer build's CLI before an upgrade leaves the schema to the upgrade.
 */
async function onDataDir(config: Config, command: string, work: (database: DatabaseHandle) => Promise<unknown>): Promise<unknown> {
  // Opening an empty (or mistyped) DATA_DIR would make a new database there, only to copy or compact nothing.
  const pgdata = pgliteDataPath(config.dataDir);
  const held = [pgdata, `${pgdata}.restored`].some((dir) => fs.existsSync(path.join(dir, 'PG_VERSION')));
  if (!held) throw new RefusedError(`DATA_DIR=${config.dataDir} holds no database (no ${path.join(pgdata, 'PG_VERSION')}): ${command} works on an existing one; check DATA_DIR.`);
  const database = await open(config);
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}

async function withDatabase(config: Config, fn: (auth: AuthService) => Promise<unknown>, reportMigrations: boolean): Promise<unknown> {
  const database = await open(config);
  try {
    const results = await database.unbounded(migrateToLatest);
    const result = await fn(new AuthService(database.db, 0));
    return reportMigrations ? { migrated: results.map((r) => r.migrationName) } : result;
  } finally {
    await database.close();
  }
}

async function main(): Promise<void> {
  try {
    const commandLine = parseCommandLine(process.argv.slice(2));
    // Help needs no configuration: it is there to read while a setting is wrong.
    if (commandLine.values.help) {
      process.stdout.write(`${USAGE}\n`);
      return;
    }
    const result = await run(commandLine, loadConfig());
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } catch (error) {
    const known = [UsageError, RefusedError, ConfigError, StartError, DataDirLockedError, AppError, HttpAdminError].some((type) => error instanceof type);
    const message = error instanceof Error ? (known ? error.message : (error.stack ?? error.message)) : String(error);
    process.stderr.write(`${message}\n`);
    process.exitCode = error instanceof UsageError ? 2 : 1;
  }
}

await main();
