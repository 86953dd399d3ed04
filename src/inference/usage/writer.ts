import type { Kysely } from 'kysely';
import type { Logger } from '../logger.js';
import type { EmbeddedPglite } from '../../db/pglite.js';
import type { Database } from '../../db/schema.js';
import { insertUsage, type UsageRecord } from './repository.js';

export interface UsageWriterOptions {
  flushIntervalMs: number;
  /** A batch this large is written at once instead of waiting for the timer. */
  batchSize?: number;
  /** Rows kept while the database is failing; the oldest are dropped beyond this. */
  maxBuffered?: number;
  /** The embedded database, written with COPY (see insertUsage). */
  embedded?: EmbeddedPglite;
}

/**
 * Buffers usage rows and writes them in batches off the request path: `record` only pushes to an
 * array. A failed write keeps its rows for the next flush (up to `maxBuffered`); `close` writes what
 * is left, and the plugin calls it when the app closes.
 */
export class UsageWriter {
  private buffer: UsageRecord[] = [];
  private inFlight: Promise<void> = Promise.resolve();
  private readonly timer: NodeJS.Timeout;
  private readonly batchSize: number;
  private readonly maxBuffered: number;
  private closed = false;
  private readonly embedded: EmbeddedPglite | undefined;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly log: Logger,
    options: UsageWriterOptions,
  ) {
    this.embedded = options.embedded;
    this.batchSize = options.batchSize ?? 5_000;
    this.maxBuffered = options.maxBuffered ?? 100_000;
    this.timer = setInterval(() => void this.flush(), options.flushIntervalMs);
    this.timer.unref();
  }

  record(row: UsageRecord): void {
    this.buffer.push(row);
    // After close there is no timer: a late row (a request cut at shutdown) is written at once.
    if (this.buffer.length >= this.batchSize || this.closed) void this.flush();
  }

  /** Writes everything recorded so far; resolves when it is in the database (or the write failed and was logged). */
  flush(): Promise<void> {
    // Chained, so that batches are written in order and never two at once (PGlite has one connection).
    this.inFlight = this.inFlight.then(() => this.writeBuffered());
    return this.inFlight;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await this.flush();
  }

  private async writeBuffered(): Promise<void> {
    if (this.buffer.length === 0) return;
    const batch = this.buffer;
    this.buffer = [];
    try {
      await insertUsage(this.db, batch, this.embedded);
    } catch (error) {
      if (isDataError(error)) {
        await this.writeOneByOne(batch);
        return;
      }
      // The database is away: keep the rows for the next flush, within bounds.
      this.buffer = batch.concat(this.buffer);
      const dropped = this.buffer.length - this.maxBuffered;
      if (dropped > 0) this.buffer.splice(0, dropped);
      this.log.error({ err: error, rows: batch.length, dropped: Math.max(0, dropped) }, 'could not write usage records; will retry');
    }
  }

  /** A row the database refuses must not hold back the others: write them singly, dropping the refused. */
  private async writeOneByOne(batch: UsageRecord[]): Promise<void> {
    for (const row of batch) {
      try {
        await insertUsage(this.db, [row], this.embedded);
      } catch (error) {
        this.log.error({ err: error, row }, 'dropped a usage record the database refused');
      }
    }
  }
}

/** SQLSTATE classes 22 (data exception) and 23 (integrity constraint): the rows, not the database, are at fault. */
function isDataError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
}
