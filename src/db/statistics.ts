import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.js';

// PostgreSQL's autovacuum_analyze_threshold and autovacuum_analyze_scale_factor defaults.
const ANALYZE_BASE_ROWS = 50;
const ANALYZE_SCALE = 0.1;

interface TableState {
  table: string;
  /** Rows at the last ANALYZE (or VACUUM); -1: never. */
  reltuples: number;
  /** Heap pages at the last ANALYZE. */
  relpages: number;
  /** Heap pages now. */
  pages: number;
  /** Rows inserted, updated or deleted since the last ANALYZE, as far as this process has counted. */
  modified: number;
  /** Whether the last ANALYZE ran in this process, so that `modified` counts every change since. */
  counted: boolean;
}

/**
 * Analyzes the tables whose planner statistics are stale, one statement per table, and returns their names.
 *
 * A table is stale, as autovacuum's analyze rule has it, when more than 50 rows + 10% of its rows changed
 * since its last ANALYZE. PGlite counts changes (`n_mod_since_analyze`) while it runs but keeps no
 * statistics file: every open starts from zero, with no `last_analyze`. So until a table is analyzed in
 * this process, the rows written before the open are estimated from the heap's growth since the last
 * ANALYZE (`relpages` then, its size now, at that ANALYZE's rows per page), and the larger of the two
 * counts. A table with rows and no ANALYZE ever (`reltuples` -1) is stale.
 */
export async function analyzeStaleTables(db: Kysely<Database>, signal?: AbortSignal): Promise<string[]> {
  // The change counts of recent statements are published at most once a second unless forced.
  await sql`select pg_stat_force_next_flush()`.execute(db);
  const { rows } = await sql<TableState>`
    select c.relname as "table", c.reltuples::float8 as reltuples, c.relpages::int as relpages,
      (pg_relation_size(c.oid) / current_setting('block_size')::int)::int as pages,
      pg_stat_get_mod_since_analyze(c.oid)::float8 as modified, pg_stat_get_last_analyze_time(c.oid) is not null as counted
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = current_schema() and c.relkind = 'r'
    order by c.relname`.execute(db);
  const analyzed: string[] = [];
  for (const state of rows.map(normalise).filter(isStale)) {
    if (signal?.aborted) break;
    await sql`analyze ${sql.id(state.table)}`.execute(db);
    analyzed.push(state.table);
  }
  return analyzed;
}

function normalise(row: TableState): TableState {
  const { table, reltuples, relpages, pages, modified, counted } = row;
  return { table, reltuples: Number(reltuples), relpages: Number(relpages), pages: Number(pages), modified: Number(modified), counted: Boolean(counted) };
}

function isStale({ reltuples, relpages, pages, modified, counted }: TableState): boolean {
  if (reltuples < 0) return pages > 0;
  const threshold = ANALYZE_BASE_ROWS + ANALYZE_SCALE * reltuples;
  if (counted) return modified > threshold;
  // Analyzed while empty, before this process: its pages hold rows of unknown count, cheap to analyze.
  if (relpages === 0) return pages > 0 || modified > threshold;
  const grown = (Math.max(0, pages - relpages) * reltuples) / relpages;
  return Math.max(modified, grown) > threshold;
}

export interface StatisticsLog {
  info(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

/**
 * Keeps the planner statistics of the embedded database current. PostgreSQL servers do this themselves
 * (autovacuum); PGlite has no autovacuum, and a table never analyzed is planned as if it had no
 * statistics: on 200k calls the traces page took 333 ms instead of 16 ms. Checks at start (once the
 * migrations ran) and every `intervalMs` after; checks never overlap, a failure is logged, and the timer
 * does not keep the process alive.
 */
export class EmbeddedStatistics {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly stopping = new AbortController();

  constructor(
    private readonly db: Kysely<Database>,
    private readonly log: StatisticsLog,
    private readonly intervalMs: number,
  ) {}

  /** Checks now, then on the timer. */
  async start(): Promise<void> {
    this.timer = setInterval(() => void this.check(), this.intervalMs);
    this.timer.unref();
    await this.check();
  }

  /** One check, or the end of the one under way. Never rejects. */
  check(): Promise<void> {
    this.running ??= this.analyze().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Stops the timer; a check under way ends after its current table, so the database can close after it. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.stopping.abort();
    await this.running;
  }

  private async analyze(): Promise<void> {
    if (this.stopping.signal.aborted) return;
    const started = performance.now();
    try {
      const tables = await analyzeStaleTables(this.db, this.stopping.signal);
      if (tables.length > 0) {
        this.log.info({ tables, duration_ms: Math.round(performance.now() - started) }, 'embedded database statistics updated (ANALYZE)');
      }
    } catch (error) {
      this.log.error({ err: error }, 'updating the embedded database statistics (ANALYZE) failed');
    }
  }
}
