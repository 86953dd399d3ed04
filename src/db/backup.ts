import fs from 'node:fs/promises';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import { ConflictError } from '../errors.js';
import { pgliteDataPath, type Database, type DatabaseHandle } from './index.js';

export interface Backup {
  /** The backup's directory; its `pgdata` replaces DATA_DIR/pgdata to restore it. */
  path: string;
  /** Bytes copied. */
  bytes: number;
  /** How long the database was held: queries waited this long. */
  held_ms: number;
  created_at: string;
}

export interface BackupOptions {
  now?: Date;
  /** Called, and awaited, once the backup holds the database, before it copies anything. */
  onHeld?: (since: Date) => Promise<void> | void;
}

const WAL_SEGMENT = /^[0-9A-F]{24}$/;

/**
 * Copies the embedded database's files into a new directory under `backupsDir` while the server runs, and
 * says where. The copy is consistent because it holds the one connection, so that no statement runs
 * while the files are copied; opening the copy recovers it as after a crash, from its last checkpoint.
 * It CHECKPOINTs first, so that the copy needs only the write-ahead log from there on: the segments
 * before it, and those PostgreSQL keeps for reuse, are left out, as is the lock file. The copy is made
 * as `pgdata.partial`, renamed to `pgdata` once whole and once a query shows the database was not closed
 * under it, and removed when it fails.
 */
export async function backupEmbedded(database: DatabaseHandle, backupsDir: string, options: BackupOptions = {}): Promise<Backup> {
  const { now = new Date(), onHeld } = options;
  if (database.kind !== 'pglite') {
    throw new ConflictError('This server keeps its data on a PostgreSQL server (DATABASE_URL): back that up with pg_dump or the server\'s own tools.');
  }
  if (database.dataDir === undefined) throw new ConflictError('This server\'s embedded database is in memory: there are no files to back up.');
  const source = pgliteDataPath(database.dataDir);
  await fs.mkdir(backupsDir, { recursive: true });
  const target = await fs.mkdtemp(path.join(backupsDir, `trainyard-${now.toISOString().replace(/[:.]/g, '-')}-`));
  const partial = path.join(target, 'pgdata.partial');
  let heldMs: number;
  try {
    heldMs = await database.db.connection().execute(async (connection) => {
      const held = new Date();
      await onHeld?.(held);
      await copyAtCheckpoint(connection, source, partial);
      // Fails when the database was closed meanwhile (a shutdown past its grace): the files may be from after.
      await sql`select 1`.execute(connection);
      return Date.now() - held.getTime();
    });
  } catch (error) {
    await fs.rm(target, { recursive: true, force: true });
    throw error;
  }
  await fs.rename(partial, path.join(target, 'pgdata'));
  return { path: target, bytes: await directoryBytes(target), held_ms: heldMs, created_at: now.toISOString() };
}

/** On the connection it holds: CHECKPOINT, then copies `source` to `target`. */
async function copyAtCheckpoint(connection: Kysely<Database>, source: string, target: string): Promise<void> {
  await sql`checkpoint`.execute(connection);
  const { rows } = await sql<{ first: string; last: string }>`
    select pg_walfile_name(redo_lsn) as first, pg_walfile_name(pg_current_wal_insert_lsn()) as last from pg_control_checkpoint()`.execute(connection);
  const { first, last } = rows[0];
  await fs.cp(source, target, {
    recursive: true,
    filter: (file) => {
      const relative = path.relative(source, file);
      if (relative === 'postmaster.pid') return false;
      const name = path.basename(relative);
      if (path.dirname(relative) === 'pg_wal' && WAL_SEGMENT.test(name)) return name >= first && name <= last;
      return true;
    },
  });
}

async function directoryBytes(dir: string): Promise<number> {
  let bytes = 0;
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    bytes += entry.isDirectory() ? await directoryBytes(file) : (await fs.stat(file)).size;
  }
  return bytes;
}

/**
 * The app's backups (POST /v1/admin/backups): one at a time, a second after the first; waited for when
 * the app closes, so that the database is not closed under a copy; and since when the one under way has
 * held the database, which the system check reports instead of waiting for it.
 */
export class EmbeddedBackups {
  private queue: Promise<unknown> = Promise.resolve();
  private since: Date | undefined;

  constructor(
    private readonly database: DatabaseHandle,
    private readonly backupsDir: string,
  ) {}

  take(options: Pick<BackupOptions, 'onHeld'> = {}): Promise<Backup> {
    const taken = this.queue.then(() =>
      backupEmbedded(this.database, this.backupsDir, {
        onHeld: async (since) => {
          this.since = since;
          await options.onHeld?.(since);
        },
      }).finally(() => (this.since = undefined)),
    );
    this.queue = taken.catch(() => undefined);
    return taken;
  }

  /** When the backup under way began to hold the database; undefined while none does. */
  get holdingSince(): Date | undefined {
    return this.since;
  }

  /** Resolves once every backup asked for so far has ended. */
  async settled(): Promise<void> {
    await this.queue;
  }
}
