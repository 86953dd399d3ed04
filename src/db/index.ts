import fs from 'node:fs';
import path from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, PostgresDialect, sql, type Driver, type MigrationResult, type PostgresDialectConfig, type QueryCompiler } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { migrations } from '../../migrations/index.js';
import { isSystemError, StartError, withoutPassword, type Config } from '../config.js';
import { completeRestore } from './backup.js';
import { DatabaseUnavailable } from './faults.js';
import { GuardedQueryCompiler } from './limits.js';
import { acquireDataDirLock, type DataDirLock } from './lock.js';
import { EmbeddedPglite, type EmbeddedLog } from './pglite.js';
import { initdbTemplateFor, initdbTemplatePath } from './pglite-template.js';
import { PgliteWorker } from './pglite-worker.js';
import type { Database } from './schema.js';
import { typeParsers } from './types.js';

export type { Database } from './schema.js';
export type DatabaseKind = 'pglite' | 'postgres';

/** Where the database layer logs what no request sees (a fault of the embedded database, a newer schema). */
export type DatabaseLog = EmbeddedLog;

/** An open database: the query builder, which engine is behind it, and how to close it. */
export interface DatabaseHandle {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseKind;
  /** Where the embedded database keeps its files; undefined on a server. */
  readonly dataDir: string | undefined;
  /** The embedded instance, on PGlite. */
  readonly embedded?: EmbeddedPglite;
  /** Set when opening completed a restore that was killed once its copy was whole (src/db/backup.ts). */
  readonly restoreCompleted?: { previous_pgdata: string | null };
  /** Runs a query and checks its answer (the system check); throws when the database is not serving. */
  check(): Promise<void>;
  /** Runs `work` on a connection without the statement timeouts (migrations may take long on big tables). */
  unbounded<T>(work: (db: Kysely<Database>) => Promise<T>): Promise<T>;
  /**
   * Re-reads kysely's table of migrations now (`MigrationWatch`); once it names one this build does not
   * have, every later statement fails with DatabaseUnavailable carrying the NewerDatabaseError message.
   * Throws what the read throws.
   */
  checkMigrations(): Promise<void>;
  /** Runs `checkMigrations` every interval from now until the handle closes (`migrateOrClose` starts it). */
  watchMigrations(): void;
  /** Where the handle logs (the app's logger); stderr until set. */
  useLog(log: DatabaseLog): void;
  close(): Promise<void>;
}

/** What keeps a handle from lending a connection, if anything: thrown instead. */
type Refusal = () => Error | undefined;

/** The driver, refusing to lend a connection (for a statement or a transaction) while `refusal` names why. */
function refusing(driver: Driver, refusal: Refusal): Driver {
  const acquire = driver.acquireConnection.bind(driver);
  driver.acquireConnection = async () => {
    const refused = refusal();
    if (refused) throw refused;
    return acquire();
  };
  return driver;
}

/**
 * Both dialects compile through the guard on bind parameters (src/db/limits.ts), and lend no connection
 * while their refusal names why (a newer schema: `MigrationWatch`).
 */
class GuardedPostgresDialect extends PostgresDialect {
  constructor(
    config: PostgresDialectConfig,
    private readonly refusal: Refusal = () => undefined,
  ) {
    super(config);
  }
  override createQueryCompiler(): QueryCompiler {
    return new GuardedQueryCompiler();
  }
  override createDriver(): Driver {
    return refusing(super.createDriver(), this.refusal);
  }
}
class GuardedPgliteDialect extends PGliteDialect {
  constructor(
    pglite: PGlite,
    private readonly refusal: Refusal,
  ) {
    super(pglite);
  }
  override createQueryCompiler(): QueryCompiler {
    return new GuardedQueryCompiler();
  }
  override createDriver(): Driver {
    return refusing(super.createDriver(), this.refusal);
  }
}

/**
 * How often a serving process re-reads kysely's table of migrations, unless its handle says otherwise: the
 * default of LEASE_SWEEP_INTERVAL_MS, which `openDatabase` passes.
 */
export const MIGRATION_CHECK_INTERVAL_MS = 5_000;

/** Until the app hands its logger over: one JSON line on stderr, so that nothing is lost. */
const stderrLog: DatabaseLog = {
  error: (details, msg) => process.stderr.write(`${JSON.stringify({ level: 'error', ...details, msg })}\n`),
  warn: (details, msg) => process.stderr.write(`${JSON.stringify({ level: 'warn', ...details, msg })}\n`),
};

/**
 * Whether another process migrated the database past this build. Several processes may share one
 * PostgreSQL server; a newer release started on it migrates the schema under the older ones still running,
 * whose statements then fail as if they were bugs (500: `there is no unique or exclusion constraint matching
 * the ON CONFLICT specification` on every worker claim once 0017 re-keyed `workers`). Once kysely's table
 * names a migration this build does not have, the handle lends no more connections: every request that
 * needs the database answers 503 with the NewerDatabaseError message, and so does the system check, until
 * the process is replaced by the newer release. Nothing un-refuses it: the schema does not go back.
 */
class MigrationWatch {
  private newer: NewerDatabaseError | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  log: DatabaseLog = stderrLog;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly intervalMs: number,
  ) {}

  /** Why the handle lends no connection: the schema moved past this build. */
  refusal(): DatabaseUnavailable | undefined {
    return this.newer && new DatabaseUnavailable(this.newer.message);
  }

  /** One statement: the migrations kysely's table names that this build does not have. */
  async check(): Promise<void> {
    if (this.newer) return;
    const { rows } = await sql<{ name: string }>`select name from kysely_migration where name <> all(${Object.keys(migrations)}::text[])`.execute(this.db);
    const unknown = unknownMigrations(rows.map((row) => row.name));
    if (unknown.length === 0 || this.newer) return;
    this.newer = new NewerDatabaseError(unknown);
    clearInterval(this.timer);
    this.log.error(
      { unknown_migrations: unknown },
      'another process migrated the database past this build: every request that needs the database answers 503 until this process is replaced by the release that migrated it',
    );
  }

  /** Checks every interval; a failed read (the database down) is the requests' to report, and is tried again. */
  start(): void {
    if (this.timer !== undefined || this.newer) return;
    this.timer = setInterval(() => {
      this.running ??= this.check()
        .catch(() => undefined)
        .finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  /**
   * Stops the timer. A check under way is not waited for: closing cuts its statement (or waits for it, as
   * a pool's end does), and its failure is swallowed like any other.
   */
  stop(): void {
    clearInterval(this.timer);
  }
}

export function pgliteDataPath(dataDir: string): string {
  return path.join(dataDir, 'pgdata');
}

export interface PoolTimeouts {
  /** Connecting to the server, and waiting for a free pooled connection (pg-pool uses one setting for both). */
  connectMs: number;
  /** A statement: the server cancels it after this (statement_timeout), the client gives up a little later; 0: no limit. */
  statementMs: number;
}

/** The client waits this much longer than the server's statement_timeout, so the server cancels first. */
const CLIENT_TIMEOUT_SLACK_MS = 2_000;

export function createPgPool(connectionString: string, max: number, timeouts: PoolTimeouts = { connectMs: 5_000, statementMs: 10_000 }): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    connectionTimeoutMillis: timeouts.connectMs,
    ...(timeouts.statementMs > 0 && {
      statement_timeout: timeouts.statementMs,
      // A frozen server (or a partition) answers nothing, not even the server's own timeout.
      query_timeout: timeouts.statementMs + CLIENT_TIMEOUT_SLACK_MS,
    }),
    keepAlive: true,
    // A stream whose client stopped reading holds its transaction; the server ends it after this.
    idle_in_transaction_session_timeout: 300_000,
    types: {
      getTypeParser: ((oid: number, format?: string) =>
        typeParsers[oid] ?? pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
    },
  });
  // An idle client whose connection dies (a server restart, a terminated backend) emits 'error' on the
  // pool; unhandled, that would crash the process. The pool discards that client and opens a new one
  // for the next query, so there is nothing else to do here.
  pool.on('error', () => undefined);
  // A checked-out client has no pool listener: its connection dying between two queries (a server
  // stopped mid-transaction) would be an uncaught 'error'. Its next query fails, and the pool drops
  // it on release because it is no longer queryable.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

/** Opens PGlite in a worker thread of its own (src/db/pglite-worker.ts), with the type parsers of src/db/types.ts. */
export function createPglite(options: { dataDir?: string; loadDataDir?: Blob } = {}): Promise<PgliteWorker> {
  return PgliteWorker.open(options);
}

/** Wraps an already open PGlite instance (tests start each one from a template dump). */
export function pgliteHandle(
  pglite: PgliteWorker,
  extra: { dataDir?: string; lock?: DataDirLock; restoreCompleted?: DatabaseHandle['restoreCompleted']; migrationCheckIntervalMs?: number } = {},
): DatabaseHandle {
  const dataDir = extra.dataDir;
  const embedded = new EmbeddedPglite(pglite, dataDir === undefined ? undefined : () => createPglite({ dataDir: pgliteDataPath(dataDir) }));
  // The dialect needs only query() and close(), which EmbeddedPglite provides. The handle closes the
  // instance itself rather than through db.destroy(): kysely's destroy skips a driver that never ran a
  // query, leaving its PGlite thread open, and a query after it fails with kysely's own error, not the
  // instance's 503 "closed".
  const db: Kysely<Database> = new Kysely<Database>({ dialect: new GuardedPgliteDialect(embedded as unknown as PGlite, () => watch.refusal()) });
  const watch = new MigrationWatch(db, extra.migrationCheckIntervalMs ?? MIGRATION_CHECK_INTERVAL_MS);
  let closed = false;
  return {
    db,
    kind: 'pglite',
    dataDir,
    embedded,
    restoreCompleted: extra.restoreCompleted,
    async check() {
      if (closed) throw new DatabaseUnavailable('The database is closed.');
      // Through kysely, so the probe waits its turn on the one connection like any query.
      await db.connection().execute(() => embedded.check());
    },
    unbounded: (work) => work(db),
    checkMigrations: () => watch.check(),
    watchMigrations: () => watch.start(),
    useLog(log) {
      watch.log = log;
      embedded.useLog(log);
    },
    async close() {
      if (closed) return;
      closed = true;
      watch.stop();
      try {
        await embedded.close();
      } finally {
        extra.lock?.release();
      }
    },
  };
}

/** `openUnbounded`: a pool of one connection without statement timeouts, for `unbounded` work. */
export function postgresHandle(pool: pg.Pool, openUnbounded?: () => pg.Pool, options: { migrationCheckIntervalMs?: number } = {}): DatabaseHandle {
  const db: Kysely<Database> = new Kysely<Database>({ dialect: new GuardedPostgresDialect({ pool }, () => watch.refusal()) });
  const watch = new MigrationWatch(db, options.migrationCheckIntervalMs ?? MIGRATION_CHECK_INTERVAL_MS);
  let closed = false;
  return {
    db,
    kind: 'postgres',
    dataDir: undefined,
    check: () => ping(db),
    checkMigrations: () => watch.check(),
    watchMigrations: () => watch.start(),
    useLog(log) {
      watch.log = log;
    },
    async unbounded(work) {
      if (!openUnbounded) return work(db);
      const other = new Kysely<Database>({ dialect: new GuardedPostgresDialect({ pool: openUnbounded() }) });
      try {
        return await work(other);
      } finally {
        await other.destroy();
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      watch.stop();
      // The pool's end waits for every connection it lent to come back: one that never does (a bug) would
      // hold the close, and the process's exit, for good. Past CLOSE_WAIT_MS the rest is left to the exit.
      let waited: NodeJS.Timeout | undefined;
      await Promise.race([db.destroy(), new Promise<void>((resolve) => (waited = setTimeout(resolve, CLOSE_WAIT_MS).unref()))]);
      clearTimeout(waited);
    },
  };
}

/** How long closing a PostgreSQL pool waits for connections still lent out. */
export const CLOSE_WAIT_MS = 5_000;

export interface OpenOptions {
  /**
   * The tarball an empty embedded data directory starts from instead of PGlite's initdb
   * (src/db/pglite-template.ts); by default the build's, when there is one; undefined: initdb.
   */
  initdbTemplate?: string;
}

/**
 * DATABASE_URL set: a pool on that server. Unset: embedded PGlite in DATA_DIR, held with a lock (./lock.ts)
 * so that a second process on the same directory stops with a clear message instead of losing writes.
 */
export async function openDatabase(config: Config, options: OpenOptions = { initdbTemplate: initdbTemplatePath() }): Promise<DatabaseHandle> {
  if (config.databaseUrl) {
    const url = config.databaseUrl;
    const connectMs = config.databasePoolTimeoutMs;
    const handle = postgresHandle(
      createPgPool(url, config.databasePoolSize, { connectMs, statementMs: config.databaseStatementTimeoutMs }),
      () => createPgPool(url, 1, { connectMs, statementMs: 0 }),
      { migrationCheckIntervalMs: config.leaseSweepIntervalMs },
    );
    // A server that is not there, or refuses the URL's user or database, is the setting's problem: say so once, here.
    try {
      await handle.check();
    } catch (error) {
      await handle.close();
      throw new StartError(`DATABASE_URL=${withoutPassword(url)}`, error);
    }
    return handle;
  }
  let lock: DataDirLock;
  try {
    lock = await acquireDataDirLock(config.dataDir);
  } catch (error) {
    throw isSystemError(error) ? new StartError(`DATA_DIR=${config.dataDir}`, error) : error;
  }
  try {
    const completed = await completeRestore(config.dataDir, new Date());
    const dataDir = pgliteDataPath(config.dataDir);
    const pglite = await createDatabaseOnce(dataDir, options.initdbTemplate);
    return pgliteHandle(pglite, { dataDir: config.dataDir, lock, restoreCompleted: completed, migrationCheckIntervalMs: config.leaseSweepIntervalMs });
  } catch (error) {
    lock.release();
    throw error;
  }
}

/**
 * Opens the embedded database at `dataDir`, making it first when there is none (from the template, or by
 * initdb). Making it writes many files in place, PG_VERSION before the configuration files, so a start
 * killed meanwhile would leave a directory that looks made and that PostgreSQL cannot open. `<dataDir>.creating`
 * is written before and removed once the database opened: a start that finds it deletes what was left and
 * makes the database again (nothing in it was ever served).
 */
async function createDatabaseOnce(dataDir: string, initdbTemplate: string | undefined): Promise<PgliteWorker> {
  const marker = `${dataDir}.creating`;
  if (fs.existsSync(marker)) fs.rmSync(dataDir, { recursive: true, force: true });
  const fresh = !fs.existsSync(path.join(dataDir, 'PG_VERSION'));
  if (fresh) fs.writeFileSync(marker, '');
  const pglite = await createPglite({ dataDir, loadDataDir: initdbTemplateFor(dataDir, initdbTemplate) });
  if (fresh) fs.rmSync(marker, { force: true });
  return pglite;
}

export class MigrationError extends Error {
  constructor(readonly migration: string | undefined, override readonly cause: unknown) {
    super(`Migration ${migration ?? '(unknown)'} failed: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = 'MigrationError';
  }
}

/**
 * A database that a newer trainyard migrated: kysely's table names migrations this build does not have.
 * A StartError, so that the server and the CLI say so without a stack.
 */
export class NewerDatabaseError extends StartError {
  constructor(readonly unknownMigrations: string[]) {
    super('database', '');
    const names = unknownMigrations.join(', ');
    this.message = `this database was migrated by a newer trainyard (${names} ${unknownMigrations.length === 1 ? 'is not a migration' : 'are not migrations'} of this build): run that release, or restore a backup taken before the upgrade`;
    this.name = 'NewerDatabaseError';
  }
}

/** The migrations kysely's table lists, or undefined when there is no such table yet. */
async function appliedMigrations(db: Kysely<Database>): Promise<string[] | undefined> {
  // Asked first, apart: PostgreSQL plans a statement whole, so one naming a missing table fails.
  const { rows: present } = await sql<{ relation: string | null }>`select to_regclass('kysely_migration')::text as relation`.execute(db);
  if (!present[0]?.relation) return undefined;
  const { rows } = await sql<{ name: string }>`select name from kysely_migration`.execute(db);
  return rows.map((row) => row.name);
}

/** The migrations in `applied` that this build does not have (a newer trainyard's), in order. */
export function unknownMigrations(applied: string[]): string[] {
  return applied.filter((name) => !Object.hasOwn(migrations, name)).sort();
}

/**
 * Brings the schema to the newest migration. Returns the migrations that ran now. Refused, with a
 * NewerDatabaseError and nothing run, for a database that a newer trainyard migrated.
 */
export async function migrateToLatest(db: Kysely<Database>): Promise<MigrationResult[]> {
  const applied = await appliedMigrations(db);
  const unknown = unknownMigrations(applied ?? []);
  if (unknown.length > 0) throw new NewerDatabaseError(unknown);
  if (applied !== undefined && allMigrationsApplied(applied)) return [];
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results = [] } = await migrator.migrateToLatest();
  if (error) throw new MigrationError(results.find((r) => r.status === 'Error')?.migrationName, error);
  return results;
}

/**
 * Brings an open database to the newest migration; closes it when that fails. From then on the handle
 * watches for a newer trainyard migrating the database under it (`MigrationWatch`).
 */
export async function migrateOrClose(database: DatabaseHandle): Promise<DatabaseHandle> {
  try {
    await database.unbounded(migrateToLatest);
  } catch (error) {
    await database.close();
    throw error;
  }
  database.watchMigrations();
  return database;
}

/**
 * Whether kysely's table lists exactly the migrations this build has: then the Migrator would do nothing,
 * but only after its table checks, lock and transaction (0.2-0.4 s of every start on PGlite; one query here).
 */
function allMigrationsApplied(appliedNames: string[]): boolean {
  const applied = new Set(appliedNames);
  const known = Object.keys(migrations);
  return applied.size === known.length && known.every((name) => applied.has(name));
}

/** Reverts every migration (used by tests to prove each `down` works). */
export async function migrateDownAll(db: Kysely<Database>): Promise<void> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  for (;;) {
    const { error, results = [] } = await migrator.migrateDown();
    if (error) throw new MigrationError(results.find((r) => r.status === 'Error')?.migrationName, error);
    if (results.length === 0) return;
  }
}

/** A query whose answer is checked: a connection that answers nothing (or garbage) fails it. */
export async function ping(db: Kysely<Database>): Promise<void> {
  const { rows } = await sql<{ ok: number }>`select 42 as ok`.execute(db);
  if (rows.length !== 1 || Number(rows[0].ok) !== 42) throw new DatabaseUnavailable('The database answered a probe wrongly.');
}
