import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, PostgresDialect, sql, type MigrationResult } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { migrations } from '../../migrations/index.js';
import type { Config } from '../config.js';
import { acquireDataDirLock, type DataDirLock } from './lock.js';
import type { Database } from './schema.js';
import { typeParsers } from './types.js';

export type { Database } from './schema.js';
export type DatabaseKind = 'pglite' | 'postgres';

/** An open database: the query builder, which engine is behind it, and how to close it. */
export interface DatabaseHandle {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseKind;
  /** Where the embedded database keeps its files; undefined on a server. */
  readonly dataDir: string | undefined;
  close(): Promise<void>;
}

export function pgliteDataPath(dataDir: string): string {
  return path.join(dataDir, 'pgdata');
}

/** What pg's pool throws when no connection became free in time (the request then answers 503). */
export const POOL_TIMEOUT_MESSAGE = 'timeout exceeded when trying to connect';

export function createPgPool(connectionString: string, max: number, acquireTimeoutMs = 30_000): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    connectionTimeoutMillis: acquireTimeoutMs,
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
  return pool;
}

export async function createPglite(options: { dataDir?: string; loadDataDir?: Blob } = {}): Promise<PGlite> {
  return PGlite.create({
    dataDir: options.dataDir,
    loadDataDir: options.loadDataDir,
    parsers: typeParsers,
  });
}

/** Wraps an already open PGlite instance (tests start each one from a template dump). */
export function pgliteHandle(pglite: PGlite, extra: { dataDir?: string; lock?: DataDirLock } = {}): DatabaseHandle {
  const db = new Kysely<Database>({ dialect: new PGliteDialect(pglite) });
  let closed = false;
  return {
    db,
    kind: 'pglite',
    dataDir: extra.dataDir,
    async close() {
      if (closed) return;
      closed = true;
      try {
        await db.destroy(); // also closes the PGlite instance
      } finally {
        extra.lock?.release();
      }
    },
  };
}

export function postgresHandle(pool: pg.Pool): DatabaseHandle {
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  let closed = false;
  return {
    db,
    kind: 'postgres',
    dataDir: undefined,
    async close() {
      if (closed) return;
      closed = true;
      await db.destroy();
    },
  };
}

/**
 * DATABASE_URL set: a pool on that server. Unset: embedded PGlite in DATA_DIR, held with a lock file
 * so that a second process on the same directory stops with a clear message instead of losing writes.
 */
export async function openDatabase(config: Config): Promise<DatabaseHandle> {
  if (config.databaseUrl) {
    return postgresHandle(createPgPool(config.databaseUrl, config.databasePoolSize, config.databasePoolTimeoutMs));
  }
  const lock = acquireDataDirLock(config.dataDir);
  try {
    const pglite = await createPglite({ dataDir: pgliteDataPath(config.dataDir) });
    return pgliteHandle(pglite, { dataDir: config.dataDir, lock });
  } catch (error) {
    lock.release();
    throw error;
  }
}

export class MigrationError extends Error {
  constructor(readonly migration: string | undefined, override readonly cause: unknown) {
    super(`Migration ${migration ?? '(unknown)'} failed: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = 'MigrationError';
  }
}

/** Brings the schema to the newest migration. Returns the migrations that ran now. */
export async function migrateToLatest(db: Kysely<Database>): Promise<MigrationResult[]> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results = [] } = await migrator.migrateToLatest();
  if (error) throw new MigrationError(results.find((r) => r.status === 'Error')?.migrationName, error);
  return results;
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

export async function ping(db: Kysely<Database>): Promise<void> {
  await sql`select 1`.execute(db);
}
