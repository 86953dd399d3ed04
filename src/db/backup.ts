import fs from 'node:fs/promises';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import { ConflictError } from '../errors.js';
import { createPglite, pgliteDataPath, unknownMigrations, type Database, type DatabaseHandle } from './index.js';
import { acquireDataDirLock } from './lock.js';
import type { MaintenanceLog } from './maintenance.js';

export interface Backup {
  /** The backup's directory; `npm run cli -- restore <path>` puts it back. */
  path: string;
  /** Bytes of its files (adapter files linked rather than copied count too). */
  bytes: number;
  /** How long the database was held: queries waited this long. */
  held_ms: number;
  created_at: string;
  /** Imported adapters (ADAPTERS_DIR) saved with it: those of the checkpoints the copy holds. */
  adapters: number;
  /** Directories deleted after it: this database's backups past BACKUP_KEEP, and copies of it cut short. */
  pruned: string[];
}

export interface BackupOptions {
  now?: Date;
  /** Called, and awaited, once the backup holds the database, before it copies anything. */
  onHeld?: (since: Date) => Promise<void> | void;
  /** Where imported adapters are stored: the ones the database names are saved with it. */
  adaptersDir?: string;
  /** Keep this many of this database's backups, this one included, and delete the older ones; 0 keeps all. */
  keep?: number;
}

/** What a backup directory holds beside `pgdata` (`pgdata.partial` while it is copied), written first. */
interface BackupManifest {
  /** The database's own id (its `trainyard_database` row), kept by every copy; null before that migration. */
  database_id: string | null;
  created_at: string;
  data_dir: string;
  /** ADAPTERS_DIR when it was taken: the restored checkpoints name their adapters there. */
  adapters_dir: string | null;
}

const BACKUP_MANIFEST = 'backup.json';
const BACKUP_PREFIX = 'trainyard-';
const WAL_SEGMENT = /^[0-9A-F]{24}$/;

/**
 * Copies the embedded database's files into a new directory under `backupsDir` while the server runs, and
 * says where. The copy is consistent because it holds the one connection, so that no statement runs
 * while the files are copied; opening the copy recovers it as after a crash, from its last checkpoint.
 * It CHECKPOINTs first, so that the copy needs only the write-ahead log from there on: the segments
 * before it, and those PostgreSQL keeps for reuse, are left out, as is the lock file. While it holds the
 * database it also saves the imported adapters the database names, into `adapters/` (hard links where
 * the file system allows: those files are written once and never changed). The copy is made as
 * `pgdata.partial`, renamed to `pgdata` once whole and once a query shows the database was not closed
 * under it, and removed when it fails. Then, with `keep`, this database's older backups go.
 */
export async function backupEmbedded(database: DatabaseHandle, backupsDir: string, options: BackupOptions = {}): Promise<Backup> {
  const { now = new Date(), onHeld, adaptersDir, keep = 0 } = options;
  const dataDir = embeddedDataDir(database);
  const source = pgliteDataPath(dataDir);
  const manifest: BackupManifest = {
    database_id: await databaseId(database.db),
    created_at: now.toISOString(),
    data_dir: path.resolve(dataDir),
    adapters_dir: adaptersDir === undefined ? null : path.resolve(adaptersDir),
  };
  // The settings refuse a BACKUP_DIR inside the database's directory by name; one reached through a link is
  // refused here, before anything is made there.
  const [realBackups, realSource] = await Promise.all([realPathSoFar(backupsDir), fs.realpath(source)]);
  if (realBackups === realSource || realBackups.startsWith(`${realSource}${path.sep}`)) {
    throw new ConflictError(`BACKUP_DIR=${backupsDir} leads into the database's own directory (${realSource}): set BACKUP_DIR to a directory outside it.`);
  }
  await fs.mkdir(backupsDir, { recursive: true });
  const target = await fs.mkdtemp(path.join(backupsDir, `${BACKUP_PREFIX}${manifest.created_at.replace(/[:.]/g, '-')}-`));
  const partial = path.join(target, 'pgdata.partial');
  let heldMs: number;
  let adapters: number;
  try {
    await fs.writeFile(path.join(target, BACKUP_MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
    [heldMs, adapters] = await database.db.connection().execute(async (connection) => {
      const held = new Date();
      await onHeld?.(held);
      await copyAtCheckpoint(connection, source, partial);
      const saved = adaptersDir === undefined ? 0 : await saveAdapters(connection, path.resolve(adaptersDir), path.join(target, 'adapters'));
      // Fails when the database was closed meanwhile (a shutdown past its grace): the files may be from after.
      await sql`select 1`.execute(connection);
      return [Date.now() - held.getTime(), saved];
    });
  } catch (error) {
    await fs.rm(target, { recursive: true, force: true });
    throw error;
  }
  await fs.rename(partial, path.join(target, 'pgdata'));
  const pruned = await pruneBackups(backupsDir, manifest, target, keep);
  return { path: target, bytes: await directoryBytes(target), held_ms: heldMs, created_at: manifest.created_at, adapters, pruned };
}

/** `dir` with every link resolved, as far as it exists; the rest of it (not made yet) as named. */
async function realPathSoFar(dir: string): Promise<string> {
  const absolute = path.resolve(dir);
  const rest: string[] = [];
  for (let current = absolute; ; current = path.dirname(current)) {
    const real = await fs.realpath(current).catch(() => undefined);
    if (real !== undefined) return path.join(real, ...rest);
    if (path.dirname(current) === current) return absolute;
    rest.unshift(path.basename(current));
  }
}

/** Why this server takes no backups of its own; undefined for an embedded database kept in files. */
function whyNoBackups(database: DatabaseHandle): string | undefined {
  if (database.kind !== 'pglite') return 'This server keeps its data on a PostgreSQL server (DATABASE_URL): back that up with pg_dump or the server\'s own tools.';
  if (database.dataDir === undefined) return 'This server\'s embedded database is in memory: there are no files to back up.';
  return undefined;
}

/** DATA_DIR of an embedded database kept in files; a ConflictError (409) for any other. */
function embeddedDataDir(database: DatabaseHandle): string {
  const why = whyNoBackups(database);
  if (why !== undefined) throw new ConflictError(why);
  return database.dataDir as string;
}

/** The database's id (migration 0023), or null in a database not yet migrated that far. */
async function databaseId(db: Kysely<Database>): Promise<string | null> {
  // Asked first, apart: PostgreSQL plans a statement whole, so one naming a missing table fails even where
  // a `case` would never read it.
  const { rows: present } = await sql<{ relation: string | null }>`select to_regclass('trainyard_database')::text as relation`.execute(db);
  if (!present[0]?.relation) return null;
  const { rows } = await sql<{ id: string | null }>`select id::text as id from trainyard_database`.execute(db);
  return rows[0]?.id ?? null;
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

/**
 * On the connection it holds: saves the directories of the imported checkpoints the database names (the
 * ones trainyard stored under `adaptersDir`) into `target`; answers how many. A directory missing on
 * disk is skipped: the copy is then as the server is.
 */
async function saveAdapters(connection: Kysely<Database>, adaptersDir: string, target: string): Promise<number> {
  const { rows } = await sql<{ uri: string }>`select uri from checkpoints where source = 'imported'`
    .execute(connection)
    .catch((error: unknown) => {
      // Undefined column or table: a database older than imported checkpoints (the CLI does not migrate).
      if (['42703', '42P01'].includes((error as { code?: string }).code ?? '')) return { rows: [] };
      throw error;
    });
  let saved = 0;
  for (const { uri } of rows) {
    const dir = path.resolve(uri);
    if (path.dirname(dir) !== adaptersDir) continue;
    if (await linkOrCopy(dir, path.join(target, path.basename(dir)))) saved++;
  }
  return saved;
}

export interface BackupList {
  /** Why this server takes no backups (PostgreSQL, or a database in memory); null when it does. */
  unavailable: string | null;
  backup_dir: string;
  /** BACKUP_KEEP. */
  keep: number;
  /** BACKUP_INTERVAL_HOURS. */
  interval_hours: number;
  data: { path: string; created_at: string; bytes: number; adapters: number }[];
  has_more: boolean;
  cut_short: string[];
  /** When the next scheduled backup is due (BACKUP_INTERVAL_HOURS); null without a schedule. */
  next_due: string | null;
}

export interface Restored {
  /** The backup put back. */
  restored: string;
  /** DATA_DIR/pgdata now holds the backup's database. */
  pgdata: string;
  /** Where the database it replaced was moved to; null when DATA_DIR held none. */
  previous_pgdata: string | null;
  /** Adapter directories put into ADAPTERS_DIR (those already there are left as they are). */
  adapters_restored: number;
}

/**
 * Puts the backup in `backupDir` back, with no server running: its database becomes DATA_DIR/pgdata, the
 * one there is moved aside to `pgdata.before-restore-<time>` (nothing is deleted), and its adapters go
 * back into ADAPTERS_DIR. Refused for a copy cut short, a directory that is no backup, and a backup whose
 * checkpoints name their adapters in another ADAPTERS_DIR. Holds the data directory's lock meanwhile, so
 * no server starts on it halfway.
 */
export async function restoreEmbedded(backupDir: string, options: { dataDir: string; adaptersDir: string; now?: Date }): Promise<Restored> {
  const { dataDir, now = new Date() } = options;
  const backup = path.resolve(backupDir);
  const adaptersDir = path.resolve(options.adaptersDir);
  const saved = path.join(backup, 'pgdata');
  const real = async (dir: string) => fs.realpath(dir).catch(() => path.resolve(dir));
  const [realBackup, realDataDir] = await Promise.all([real(backup), real(dataDir)]);
  if (realBackup === realDataDir) throw new ConflictError(`${backup} is DATA_DIR itself: name a backup's directory (under BACKUP_DIR).`);
  if (realBackup === pgliteDataPath(realDataDir)) throw new ConflictError(`${backup} is DATA_DIR's own database: name a backup's directory (under BACKUP_DIR).`);
  if (!(await isDatabaseDirectory(saved))) {
    if (await isDatabaseDirectory(backup)) {
      throw new ConflictError(`${backup} is a database directory: name the backup's directory, the one that holds it (${path.dirname(backup)}).`);
    }
    const cutShort = (await exists(path.join(backup, 'pgdata.partial'))) || (await readManifest(backup)) !== undefined;
    throw new ConflictError(
      cutShort
        ? `${backup} is a backup that was cut short (it holds no whole pgdata): it cannot be restored; delete it.`
        : `${backup} is not a trainyard backup: it holds no pgdata directory with a database in it.`,
    );
  }
  const savedAdapters = path.join(backup, 'adapters');
  const manifest = await readManifest(backup);
  if (manifest?.adapters_dir && manifest.adapters_dir !== adaptersDir && (await exists(savedAdapters))) {
    throw new ConflictError(
      `The backup's checkpoints name their adapters in ${manifest.adapters_dir}, and ADAPTERS_DIR is ${adaptersDir}: set ADAPTERS_DIR=${manifest.adapters_dir} to restore it.`,
    );
  }
  // A restore into a DATA_DIR that does not exist yet makes it; refused, it takes it away again.
  const madeDataDir = await fs.mkdir(dataDir, { recursive: true });
  let restored = false;
  const lock = await acquireDataDirLock(dataDir);
  try {
    // Copied beside it, so that the database in place is moved aside only once the copy is whole.
    const pgdata = pgliteDataPath(dataDir);
    const { copying, whole } = restorePaths(dataDir);
    await Promise.all([fs.rm(copying, { recursive: true, force: true }), fs.rm(whole, { recursive: true, force: true })]);
    await fs.cp(saved, copying, { recursive: true });
    // Opened before it replaces anything: a backup this build cannot open (damaged files, or a newer
    // release's schema) is refused here, with the database in place left where it is.
    const unusable = await whyUnopenable(copying);
    if (unusable !== undefined) {
      await fs.rm(copying, { recursive: true, force: true });
      throw new ConflictError(`${backup} cannot be restored: ${unusable}. Nothing was changed.`);
    }
    // Then the adapters: put back beside the database in place, they change nothing it serves, so a
    // restore that fails here has not replaced it yet.
    let restoredAdapters = 0;
    if (await exists(savedAdapters)) {
      for (const entry of await fs.readdir(savedAdapters, { withFileTypes: true })) {
        const target = path.join(adaptersDir, entry.name);
        if (!entry.isDirectory() || (await exists(target))) continue;
        // Whole or not at all: a directory in ADAPTERS_DIR is taken to be a whole adapter.
        await fs.rm(`${target}.restoring`, { recursive: true, force: true });
        await linkOrCopy(path.join(savedAdapters, entry.name), `${target}.restoring`);
        await fs.rename(`${target}.restoring`, target);
        restoredAdapters++;
      }
    }
    await fs.rename(copying, whole);
    const { previous_pgdata } = (await completeRestore(dataDir, now))!;
    restored = true;
    return { restored: backup, pgdata, previous_pgdata, adapters_restored: restoredAdapters };
  } finally {
    lock.release();
    if (!restored && madeDataDir !== undefined) await removeEmptyDirs(path.resolve(dataDir), madeDataDir);
  }
}

/** `dir` and its parents up to `top`, each only while empty: what `fs.mkdir(dir, {recursive})` made. */
async function removeEmptyDirs(dir: string, top: string): Promise<void> {
  for (let current = dir; ; current = path.dirname(current)) {
    if (!(await fs.rmdir(current).then(() => true, () => false)) || current === top || path.dirname(current) === current) return;
  }
}

/**
 * Why this build cannot serve the database in `pgdata` (a restore's copy of a backup): it does not open, or
 * a newer trainyard migrated it. Undefined when it opens and names no migration this build lacks. Closed
 * again before it answers.
 */
async function whyUnopenable(pgdata: string): Promise<string | undefined> {
  let pglite;
  try {
    pglite = await createPglite({ dataDir: pgdata });
  } catch (error) {
    return `its database does not open (${firstLine(error)})`;
  }
  try {
    const present = await pglite.query<{ relation: string | null }>(`select to_regclass('kysely_migration')::text as relation`);
    if (!present.rows[0]?.relation) return undefined; // never migrated: the next start migrates it
    const { rows } = await pglite.query<{ name: string }>('select name from kysely_migration');
    const unknown = unknownMigrations(rows.map((row) => row.name));
    if (unknown.length > 0) {
      return `a newer trainyard migrated it (${unknown.join(', ')} ${unknown.length === 1 ? 'is not a migration' : 'are not migrations'} of this build): restore it with that release`;
    }
    return undefined;
  } catch (error) {
    return `its database does not answer (${firstLine(error)})`;
  } finally {
    await pglite.close();
  }
}

function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split('\n')[0];
}

/** Where a restore copies the backup's database (`copying`), renamed `whole` once the copy is complete. */
function restorePaths(dataDir: string): { copying: string; whole: string } {
  const pgdata = pgliteDataPath(dataDir);
  return { copying: `${pgdata}.restoring`, whole: `${pgdata}.restored` };
}

/**
 * A restore's last step, run by the restore and, with the data directory's lock held, by every start: a
 * whole copy of a backup (`pgdata.restored`) takes the place of the database, which is moved aside to
 * `pgdata.before-restore-<now>` (null when there was none). A restore killed after its copy was whole, even
 * between the two renames, is thus completed by the next start instead of leaving the server without its
 * database; a copy cut short is deleted (only a restore holding the lock writes one). Undefined when there is
 * no whole copy: nothing to complete.
 */
export async function completeRestore(dataDir: string, now: Date): Promise<{ previous_pgdata: string | null } | undefined> {
  const pgdata = pgliteDataPath(dataDir);
  const { copying, whole } = restorePaths(dataDir);
  await fs.rm(copying, { recursive: true, force: true });
  if (!(await isDatabaseDirectory(whole))) return undefined;
  let previous: string | null = null;
  if (await exists(pgdata)) {
    previous = `${pgdata}.before-restore-${now.toISOString().replace(/[:.]/g, '-')}`;
    await fs.rename(pgdata, previous);
  }
  await fs.rename(whole, pgdata);
  return { previous_pgdata: previous };
}

/**
 * Makes `target` hold the files under `source`: hard links where the file system allows, copies where
 * not (another file system). Answers false when `source` does not exist.
 */
export async function linkOrCopy(source: string, target: string): Promise<boolean> {
  let entries;
  try {
    entries = await fs.readdir(source, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
  await fs.mkdir(target, { recursive: true });
  for (const entry of entries) {
    const from = path.join(source, entry.name);
    const to = path.join(target, entry.name);
    if (entry.isDirectory()) await linkOrCopy(from, to);
    else if (entry.isFile()) {
      await fs.link(from, to).catch(async (error: NodeJS.ErrnoException) => {
        if (!['EXDEV', 'EPERM', 'ENOTSUP', 'EMLINK', 'EACCES'].includes(error.code ?? '')) throw error;
        await fs.copyFile(from, to);
      });
    }
  }
  return true;
}

/** The manifest of a backup directory, or undefined when it has none that parses (not one of ours, or older). */
async function readManifest(dir: string): Promise<BackupManifest | undefined> {
  try {
    const manifest = JSON.parse(await fs.readFile(path.join(dir, BACKUP_MANIFEST), 'utf8')) as Partial<BackupManifest>;
    return typeof manifest.created_at === 'string' ? { database_id: null, data_dir: '', adapters_dir: null, ...manifest } as BackupManifest : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Deletes, among the backups in `backupsDir` this database made from this data directory (same id, same
 * DATA_DIR), the copies cut short (only one process at a time holds a data directory, and it takes one
 * backup at a time, so any other was left by a killed process) and, with `keep`, the whole ones past the
 * newest `keep` (`current` among them). Other databases' backups, another data directory's (a copy of this
 * database restored elsewhere keeps its id), ones without a manifest, and anything else there are left alone.
 */
async function pruneBackups(backupsDir: string, made: BackupManifest, current: string, keep: number): Promise<string[]> {
  const { whole, cutShort } = await ownBackups(backupsDir, made, current);
  const pruned = [...cutShort, ...(keep > 0 ? whole.slice(keep - 1).map((backup) => backup.dir) : [])];
  for (const dir of pruned) await fs.rm(dir, { recursive: true, force: true });
  return pruned.sort();
}

/**
 * The backup directories in `backupsDir` that database `made.database_id` made from `made.data_dir`, but
 * `except`: the whole ones, newest first, and the ones cut short. None when the id is unknown.
 */
async function ownBackups(
  backupsDir: string,
  made: Pick<BackupManifest, 'database_id' | 'data_dir'>,
  except?: string,
): Promise<{ whole: { dir: string; createdAt: string }[]; cutShort: string[] }> {
  const whole: { dir: string; createdAt: string }[] = [];
  const cutShort: string[] = [];
  if (made.database_id === null) return { whole, cutShort };
  const entries = await fs.readdir(backupsDir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  for (const entry of entries) {
    const dir = path.join(backupsDir, entry.name);
    if (!entry.isDirectory() || !entry.name.startsWith(BACKUP_PREFIX) || dir === except) continue;
    const manifest = await readManifest(dir);
    if (manifest?.database_id !== made.database_id || manifest.data_dir !== made.data_dir) continue;
    if (await isDatabaseDirectory(path.join(dir, 'pgdata'))) whole.push({ dir, createdAt: manifest.created_at });
    else cutShort.push(dir); // the manifest is written first: a copy cut short, wherever it stopped
  }
  whole.sort((a, b) => (a.createdAt === b.createdAt ? b.dir.localeCompare(a.dir) : b.createdAt.localeCompare(a.createdAt)));
  return { whole, cutShort };
}

/**
 * How long until the next scheduled backup, the newest whole one having been taken at `newest`: an
 * interval after it, at once when there is none or it is older, never more than an interval away (a
 * clock set back).
 */
export function nextBackupDelay(newest: string | undefined, intervalMs: number, now: Date): number {
  if (newest === undefined) return 0;
  return Math.min(intervalMs, Math.max(0, Date.parse(newest) + intervalMs - now.getTime()));
}

/** A real directory (no link) holding a PostgreSQL data directory's PG_VERSION file. */
async function isDatabaseDirectory(dir: string): Promise<boolean> {
  const [self, version] = await Promise.all([fs.lstat(dir).catch(() => undefined), fs.lstat(path.join(dir, 'PG_VERSION')).catch(() => undefined)]);
  return self?.isDirectory() === true && version?.isFile() === true;
}

async function exists(file: string): Promise<boolean> {
  return fs.stat(file).then(
    () => true,
    () => false,
  );
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
  /** The schedule's log, once the schedule started and until it stopped. */
  private scheduled: MaintenanceLog | undefined;
  private timer: NodeJS.Timeout | undefined;
  private due: Date | undefined;
  private stopped = false;

  constructor(
    private readonly database: DatabaseHandle,
    /** BACKUP_DIR, ADAPTERS_DIR, BACKUP_KEEP and BACKUP_INTERVAL_HOURS (0: no schedule). */
    private readonly options: { backupsDir: string; adaptersDir: string; keep: number; intervalMs: number },
  ) {}

  /** One backup, after any under way. With a schedule, the next scheduled one is due an interval after it. */
  take(options: Pick<BackupOptions, 'onHeld'> = {}): Promise<Backup> {
    const { backupsDir, adaptersDir, keep } = this.options;
    const taken = this.queue.then(async () => {
      try {
        const backup = await backupEmbedded(this.database, backupsDir, {
          adaptersDir,
          keep,
          onHeld: async (since) => {
            this.since = since;
            await options.onHeld?.(since);
          },
        });
        if (this.scheduled) this.planFor(new Date(Date.parse(backup.created_at) + this.options.intervalMs));
        return backup;
      } finally {
        this.since = undefined;
      }
    });
    this.queue = taken.catch(() => undefined);
    return taken;
  }

  /**
   * This database's backups from this data directory (GET /v1/admin/backups): the whole ones, newest
   * first, at most `limit`, and the copies cut short that the next backup deletes.
   */
  async list(limit: number): Promise<BackupList> {
    const settings = { backup_dir: this.options.backupsDir, keep: this.options.keep, interval_hours: this.options.intervalMs / 3_600_000 };
    const unavailable = whyNoBackups(this.database);
    if (unavailable !== undefined) return { unavailable, ...settings, data: [], has_more: false, cut_short: [], next_due: null };
    const made = { database_id: await databaseId(this.database.db), data_dir: path.resolve(embeddedDataDir(this.database)) };
    const { whole, cutShort } = await ownBackups(this.options.backupsDir, made);
    const data = await Promise.all(
      whole.slice(0, limit).map(async ({ dir, createdAt }) => ({
        path: dir,
        created_at: createdAt,
        bytes: await directoryBytes(dir),
        adapters: (await fs.readdir(path.join(dir, 'adapters')).catch(() => [])).length,
      })),
    );
    return { unavailable: null, ...settings, data, has_more: whole.length > limit, cut_short: cutShort.sort(), next_due: this.due?.toISOString() ?? null };
  }

  /** When the backup under way began to hold the database; undefined while none does. */
  get holdingSince(): Date | undefined {
    return this.since;
  }

  /** Resolves once every backup asked for so far has ended. */
  async settled(): Promise<void> {
    await this.queue;
  }

  /**
   * Takes a backup every `intervalMs` (BACKUP_INTERVAL_HOURS), counted from the newest whole one this
   * database made from this data directory, so that restarts do not put it off: at once when that one is
   * older than the interval, or there is none. A backup asked for meanwhile counts too. Each is logged; a
   * failed one too, and tried again after an hour (or the interval, when shorter). Does nothing with an
   * interval of 0, or for a database not kept in files.
   */
  async schedule(log: MaintenanceLog): Promise<void> {
    const { intervalMs } = this.options;
    if (intervalMs === 0 || whyNoBackups(this.database) !== undefined || this.scheduled || this.stopped) return;
    this.scheduled = log;
    let newest: string | undefined;
    try {
      const made = { database_id: await databaseId(this.database.db), data_dir: path.resolve(embeddedDataDir(this.database)) };
      newest = (await ownBackups(this.options.backupsDir, made)).whole[0]?.createdAt;
    } catch (error) {
      // The backup due at once will meet the same problem and log it too; the server starts regardless.
      log.error({ err: error }, 'could not read BACKUP_DIR for the newest backup');
    }
    const now = new Date();
    this.planFor(new Date(now.getTime() + nextBackupDelay(newest, intervalMs, now)));
  }

  /** When the next scheduled backup is due; undefined when none is scheduled. */
  get nextDue(): Date | undefined {
    return this.due;
  }

  /** No scheduled backup starts after this; one under way goes on (`settled` waits for it). */
  stopSchedule(): void {
    this.stopped = true;
    this.scheduled = undefined;
    clearTimeout(this.timer);
    this.due = undefined;
  }

  /** Sets the one timer for the scheduled backup due at `due`, never more than an interval away (a clock set back). */
  private planFor(due: Date): void {
    if (!this.scheduled) return;
    const { intervalMs } = this.options;
    const at = new Date(Math.min(due.getTime(), Date.now() + intervalMs));
    clearTimeout(this.timer);
    this.due = at;
    // setTimeout fires at once past 2^31 - 1 ms (24.8 days): a longer wait is taken in parts.
    this.timer = setTimeout(() => void this.fire(at), Math.min(MAX_TIMEOUT_MS, Math.max(0, at.getTime() - Date.now())));
    this.timer.unref();
  }

  private async fire(due: Date): Promise<void> {
    if (!this.scheduled) return;
    if (Date.now() < due.getTime()) return this.planFor(due);
    const log = this.scheduled;
    const { intervalMs } = this.options;
    try {
      log.info({ backup: await this.take() }, 'scheduled backup of the embedded database taken'); // take plans the next
    } catch (error) {
      log.error({ err: error }, 'scheduled backup of the embedded database failed');
      this.planFor(new Date(Date.now() + Math.min(intervalMs, RETRY_AFTER_MS)));
    }
  }
}

/** A scheduled backup that failed is tried again this much later (or an interval, when shorter). */
const RETRY_AFTER_MS = 3_600_000;
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

