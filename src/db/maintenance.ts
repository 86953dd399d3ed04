import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.js';

// PostgreSQL's autovacuum defaults: autovacuum_analyze_threshold and _scale_factor,
// autovacuum_vacuum_threshold and _scale_factor, autovacuum_vacuum_insert_threshold and _scale_factor.
const ANALYZE_BASE_ROWS = 50;
const ANALYZE_SCALE = 0.1;
const VACUUM_BASE_ROWS = 50;
const VACUUM_SCALE = 0.2;
const VACUUM_INSERT_BASE_ROWS = 1000;
const VACUUM_INSERT_SCALE = 0.2;

/** Transaction ids (and multixact ids) a database's oldest unfrozen row may be behind before it is frozen. */
export interface FreezeLimits {
  /** autovacuum_freeze_max_age's default. */
  xidAge: number;
  /** autovacuum_multixact_freeze_max_age's default. */
  multixactAge: number;
}

const FREEZE_LIMITS: FreezeLimits = { xidAge: 200_000_000, multixactAge: 400_000_000 };

/**
 * Write-ahead log a check lets accumulate before it runs a CHECKPOINT. A server's checkpointer runs one
 * every 5 minutes; PGlite has none: 830 MB of log written without a checkpoint stayed in the data
 * directory, and opening it after a kill replayed it all (8.3 s, against 0.24 s for a clean open).
 */
const CHECKPOINT_WAL_BYTES = 64 * 1024 * 1024;

interface TableState {
  table: string;
  /** Rows at the last ANALYZE or VACUUM; -1: never. */
  reltuples: number;
  /** Heap pages at the last ANALYZE or VACUUM. */
  relpages: number;
  /** Heap pages now. */
  pages: number;
  /** Rows inserted, updated or deleted since the last ANALYZE, as far as this process has counted. */
  modified: number;
  /** Whether the last ANALYZE ran in this process, so that `modified` counts every change since. */
  analyzedHere: boolean;
  /** Dead row versions, as far as this process has counted. */
  dead: number;
  /** Rows inserted since the last VACUUM, as far as this process has counted. */
  inserted: number;
  /** Whether the last VACUUM ran in this process, so that `dead` and `inserted` count every change since. */
  vacuumedHere: boolean;
  /** The same three of the table's TOAST table (its values over about 2 kB), 0 without one. */
  toastReltuples: number;
  toastDead: number;
  toastInserted: number;
}

export interface Maintained {
  /** Tables vacuumed, in name order. */
  vacuumed: string[];
  /** Tables analyzed (by ANALYZE, or by VACUUM (ANALYZE)), in name order. */
  analyzed: string[];
  /** Whether the whole database was vacuumed with FREEZE, its oldest row ids being past `FreezeLimits`. */
  froze: boolean;
  /** Whether a CHECKPOINT ran, more than `CHECKPOINT_WAL_BYTES` of log having been written since the last. */
  checkpointed: boolean;
}

export interface MaintenanceOptions {
  /** Stops between statements. */
  signal?: AbortSignal;
  /** ANALYZE only, as trainyard did before it vacuumed and checkpointed (the benchmark's baseline). */
  analyzeOnly?: boolean;
  freezeLimits?: FreezeLimits;
  checkpointWalBytes?: number;
}

/**
 * Vacuums and analyzes the embedded database's tables by autovacuum's rules, one statement per table,
 * then checkpoints it when its log has grown, and says what it did. PGlite runs no autovacuum and no
 * checkpointer.
 *
 * - VACUUM, so that the space of dead row versions (every update, every delete) is used again instead of
 *   the table growing, and pages are marked all-visible: when more than 50 + 20% of a table's rows, or
 *   of its TOAST table's, are dead, or more than 1,000 + 20% were inserted since its last VACUUM. A row
 *   whose large value is rewritten in place leaves its dead versions in the TOAST table only.
 * - ANALYZE, so that the planner knows the table: when more than 50 + 10% of its rows changed since its
 *   last ANALYZE, or it has rows and was never analyzed.
 * - VACUUM (FREEZE) of the whole database, catalogs included, once its oldest unfrozen row is more than
 *   200 million transaction ids old (400 million multixact ids). A server's autovacuum forces this to
 *   keep rows from disappearing when the 32-bit ids wrap around; PGlite runs as a single user, where
 *   PostgreSQL only warns.
 * - CHECKPOINT once more than `CHECKPOINT_WAL_BYTES` of write-ahead log was written since the last one,
 *   which bounds the log the data directory holds and what opening it after a crash replays.
 *
 * PGlite counts changes while it runs but keeps no statistics file: every open starts from zero, with no
 * `last_analyze` or `last_vacuum`. So every table with rows is vacuumed once in each process, at its
 * first check, which settles whatever was updated or deleted before the open: a VACUUM skips the pages
 * the last one left all-visible and untouched since, so this costs little but for tables never vacuumed.
 * Until a table is analyzed in this process, the rows written before the open are estimated from its
 * heap's growth since the last ANALYZE (`relpages` then, its size now, at that ANALYZE's rows per page),
 * and the larger of the two counts; a table with rows and no ANALYZE ever (`reltuples` -1) is due.
 */
export async function maintainTables(db: Kysely<Database>, options: MaintenanceOptions = {}): Promise<Maintained> {
  const { signal, analyzeOnly = false, freezeLimits = FREEZE_LIMITS, checkpointWalBytes = CHECKPOINT_WAL_BYTES } = options;
  const maintained: Maintained = { vacuumed: [], analyzed: [], froze: false, checkpointed: false };
  if (!analyzeOnly && (await pastFreezeLimits(db, freezeLimits))) {
    // Vacuums (and freezes) every table, so no per-table VACUUM is due after it.
    await sql`vacuum (freeze)`.execute(db);
    maintained.froze = true;
  }
  // The change counts of recent statements are published at most once a second unless forced.
  await sql`select pg_stat_force_next_flush()`.execute(db);
  const { rows } = await sql<TableState>`
    select c.relname as "table", c.reltuples::float8 as reltuples, c.relpages::int as relpages,
      (pg_relation_size(c.oid) / current_setting('block_size')::int)::int as pages,
      pg_stat_get_mod_since_analyze(c.oid)::float8 as modified, pg_stat_get_last_analyze_time(c.oid) is not null as "analyzedHere",
      pg_stat_get_dead_tuples(c.oid)::float8 as dead, pg_stat_get_ins_since_vacuum(c.oid)::float8 as inserted,
      pg_stat_get_last_vacuum_time(c.oid) is not null as "vacuumedHere",
      coalesce(t.reltuples, 0)::float8 as "toastReltuples", coalesce(pg_stat_get_dead_tuples(t.oid), 0)::float8 as "toastDead",
      coalesce(pg_stat_get_ins_since_vacuum(t.oid), 0)::float8 as "toastInserted"
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
      left join pg_class t on t.oid = c.reltoastrelid
    where n.nspname = current_schema() and c.relkind = 'r'
    order by c.relname`.execute(db);
  for (const state of rows.map(normalise)) {
    if (signal?.aborted) break;
    const toVacuum = !analyzeOnly && !maintained.froze && vacuumDue(state);
    const toAnalyze = analyzeDue(state);
    if (toVacuum && toAnalyze) await sql`vacuum (analyze) ${sql.id(state.table)}`.execute(db);
    else if (toVacuum) await sql`vacuum ${sql.id(state.table)}`.execute(db);
    else if (toAnalyze) await sql`analyze ${sql.id(state.table)}`.execute(db);
    if (toVacuum) maintained.vacuumed.push(state.table);
    if (toAnalyze) maintained.analyzed.push(state.table);
  }
  if (!analyzeOnly && !signal?.aborted && (await walSinceCheckpoint(db)) > checkpointWalBytes) {
    await sql`checkpoint`.execute(db);
    maintained.checkpointed = true;
  }
  return maintained;
}

/** Bytes of write-ahead log written since the last checkpoint began (what a recovery would replay). */
export async function walSinceCheckpoint(db: Kysely<Database>): Promise<number> {
  const { rows } = await sql<{ bytes: number }>`select (pg_current_wal_insert_lsn() - redo_lsn)::float8 as bytes from pg_control_checkpoint()`.execute(db);
  return Number(rows[0].bytes);
}

async function pastFreezeLimits(db: Kysely<Database>, limits: FreezeLimits): Promise<boolean> {
  const { rows } = await sql<{ xid_age: number; multixact_age: number }>`
    select age(datfrozenxid)::float8 as xid_age, mxid_age(datminmxid)::float8 as multixact_age
    from pg_database where datname = current_database()`.execute(db);
  return Number(rows[0].xid_age) > limits.xidAge || Number(rows[0].multixact_age) > limits.multixactAge;
}

function normalise(row: TableState): TableState {
  return {
    table: row.table,
    reltuples: Number(row.reltuples),
    relpages: Number(row.relpages),
    pages: Number(row.pages),
    modified: Number(row.modified),
    analyzedHere: Boolean(row.analyzedHere),
    dead: Number(row.dead),
    inserted: Number(row.inserted),
    vacuumedHere: Boolean(row.vacuumedHere),
    toastReltuples: Number(row.toastReltuples),
    toastDead: Number(row.toastDead),
    toastInserted: Number(row.toastInserted),
  };
}

function analyzeDue({ reltuples, relpages, pages, modified, analyzedHere }: TableState): boolean {
  if (reltuples < 0) return pages > 0;
  const threshold = ANALYZE_BASE_ROWS + ANALYZE_SCALE * reltuples;
  if (analyzedHere) return modified > threshold;
  // Analyzed while empty, before this process: its pages hold rows of unknown count, cheap to analyze.
  if (relpages === 0) return pages > 0 || modified > threshold;
  const grown = (Math.max(0, pages - relpages) * reltuples) / relpages;
  return Math.max(modified, grown) > threshold;
}

function vacuumDue(state: TableState): boolean {
  if (!state.vacuumedHere) return state.pages > 0;
  return pastVacuumThresholds(state.dead, state.inserted, state.reltuples) || pastVacuumThresholds(state.toastDead, state.toastInserted, state.toastReltuples);
}

function pastVacuumThresholds(dead: number, inserted: number, reltuples: number): boolean {
  const rows = Math.max(0, reltuples);
  return dead > VACUUM_BASE_ROWS + VACUUM_SCALE * rows || inserted > VACUUM_INSERT_BASE_ROWS + VACUUM_INSERT_SCALE * rows;
}

export interface MaintenanceLog {
  info(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

/**
 * Does for the embedded database what autovacuum and the checkpointer do on a PostgreSQL server
 * (`maintainTables`). Without it a table never analyzed is planned as if it had no statistics (on 200k
 * calls the traces page took 333 ms instead of 16 ms), the space of every updated or deleted row is never
 * used again, and the write-ahead log grows without a checkpoint.
 * Checks at start (once the migrations ran) and every `intervalMs` after; checks never overlap, a
 * failure is logged, and the timer does not keep the process alive.
 */
export class EmbeddedMaintenance {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly stopping = new AbortController();

  constructor(
    private readonly db: Kysely<Database>,
    private readonly log: MaintenanceLog,
    private readonly intervalMs: number,
    /** The first check still under way after this long is said to be, since the server listens only after it. */
    private readonly slowStartMs = 2_000,
  ) {}

  /** Checks now, then on the timer. */
  async start(): Promise<void> {
    this.timer = setInterval(() => void this.check(), this.intervalMs);
    this.timer.unref();
    const slow = setTimeout(
      () =>
        this.log.info(
          { after_ms: this.slowStartMs },
          'maintaining the embedded database before listening: the first check of a start vacuums every table, about 3 s a GB for a database never vacuumed',
        ),
      this.slowStartMs,
    );
    try {
      await this.check();
    } finally {
      clearTimeout(slow);
    }
  }

  /** One check, or the end of the one under way. Never rejects. */
  check(): Promise<void> {
    this.running ??= this.maintain().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Stops the timer; a check under way ends after its current statement, so the database can close after it. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.stopping.abort();
    await this.running;
  }

  private async maintain(): Promise<void> {
    if (this.stopping.signal.aborted) return;
    const started = performance.now();
    try {
      const { vacuumed, analyzed, froze, checkpointed } = await maintainTables(this.db, { signal: this.stopping.signal });
      if (vacuumed.length > 0 || analyzed.length > 0 || froze || checkpointed) {
        this.log.info({ vacuumed, analyzed, froze, checkpointed, duration_ms: Math.round(performance.now() - started) }, 'embedded database maintained (VACUUM, ANALYZE, CHECKPOINT)');
      }
    } catch (error) {
      this.log.error({ err: error }, 'maintaining the embedded database (VACUUM, ANALYZE, CHECKPOINT) failed');
    }
  }
}

export interface Compacted {
  /** The database's tables and indexes (pg_database_size), before and after. */
  database_bytes_before: number;
  database_bytes_after: number;
}

/**
 * Rewrites every table and index without the space that deleted and updated rows left (VACUUM (FULL,
 * ANALYZE)), so that the files shrink, then checkpoints. A plain VACUUM only makes that space usable again.
 * Holds the database until it is done: for the CLI, with no server running.
 */
export async function compactDatabase(db: Kysely<Database>): Promise<Compacted> {
  const size = async (): Promise<number> =>
    Number((await sql<{ bytes: string }>`select pg_database_size(current_database())::text as bytes`.execute(db)).rows[0].bytes);
  const before = await size();
  await sql`vacuum (full, analyze)`.execute(db);
  await sql`checkpoint`.execute(db);
  return { database_bytes_before: before, database_bytes_after: await size() };
}
