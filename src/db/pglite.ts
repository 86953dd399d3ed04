import { DatabaseUnavailable } from './faults.js';
import type { PgliteWorker } from './pglite-worker.js';

export interface EmbeddedLog {
  error(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
}

/**
 * The one embedded PGlite instance, as the kysely dialect sees it (query and close), able to tell a
 * working instance from a corrupted one and to replace it.
 *
 * PGlite runs Postgres in a worker thread of this process (src/db/pglite-worker.ts); a fault in its
 * JavaScript side (its protocol parser throws on a message it cannot read) leaves the instance answering
 * every later query with no rows and no error, and a worker that dies fails every query. So an error
 * that Postgres did not raise (no SQLSTATE) is followed by a probe, as is every system check: a probe
 * that does not read back its own value means the instance is corrupt. A data
 * directory is then reopened (Postgres recovers from its write-ahead log: committed data survives); an
 * in-memory instance cannot be, and the handle fails every query from then on (503) so that nothing is
 * served from it.
 *
 * Once close() begins, none of this happens: queries cut by the close (PGlite's own "closed" error, a
 * stopped worker) are no fault of the instance, and a reopen would open the data directory again after
 * its owner released its lock. They, and every later query, fail with DatabaseUnavailable (503).
 */
export class EmbeddedPglite {
  private failure: string | undefined;
  private recovering: Promise<void> | undefined;
  private closed = false;

  constructor(
    private current: PgliteWorker,
    private readonly reopen: (() => Promise<PgliteWorker>) | undefined,
  ) {}

  private log: EmbeddedLog = { error: () => undefined, warn: () => undefined };

  /** Where faults are logged (the app's logger, once there is one). */
  useLog(log: EmbeddedLog): void {
    this.log = log;
  }

  /** The instance queries go to now (tests reach past the guards through it). */
  get instance(): PgliteWorker {
    return this.current;
  }

  async query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; affectedRows?: number }> {
    this.throwIfFailed();
    try {
      return await this.current.query(text, params);
    } catch (error) {
      throw await this.afterError(error);
    }
  }

  /** `COPY ... FROM '/dev/blob'` with `data` as the input (PostgreSQL's text format, for instance). */
  async copyFrom(text: string, data: string): Promise<void> {
    this.throwIfFailed();
    try {
      await this.current.query(text, [], { blob: data });
    } catch (error) {
      throw await this.afterError(error);
    }
  }

  /**
   * Probes the instance and replaces it when corrupt. Resolves when it works (as it is or reopened);
   * throws when it was corrupt, even if the reopen succeeded, so a system check reports the fault.
   */
  async check(): Promise<void> {
    this.throwIfFailed();
    if (await this.probe()) return;
    this.throwIfFailed(); // closed while probing
    await this.recover(new Error('probe read back no rows'));
    throw new DatabaseUnavailable('The embedded database answered a probe wrongly and was reopened.');
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.recovering; // a reopen under way ends first, so that the instance it opened is the one closed
    await this.current.close();
  }

  private throwIfFailed(): void {
    if (this.closed) throw new DatabaseUnavailable(CLOSED);
    if (this.failure) throw new DatabaseUnavailable(this.failure);
  }

  /** The error a failed statement is answered with, once the instance was checked (and maybe reopened). */
  private async afterError(error: unknown): Promise<unknown> {
    if (hasSqlState(error)) return error; // Postgres raised it: the instance works
    if (!this.closed && !(await this.probe())) await this.recover(error);
    // Cut by close(): PGlite's own "closed" error is no 500.
    return this.closed && !(error instanceof DatabaseUnavailable) ? new DatabaseUnavailable(CLOSED) : error;
  }

  private async probe(): Promise<boolean> {
    try {
      const { rows } = await this.current.query<{ ok: number }>('select 42 as ok');
      return rows.length === 1 && rows[0].ok === 42;
    } catch {
      return false;
    }
  }

  private recover(cause: unknown): Promise<void> {
    this.recovering ??= this.replace(cause).finally(() => {
      this.recovering = undefined;
    });
    return this.recovering;
  }

  private async replace(cause: unknown): Promise<void> {
    const err = cause instanceof Error ? cause : new Error(String(cause));
    if (this.closed) return;
    if (!this.reopen) {
      this.failure = 'The embedded database failed and cannot be reopened (it is in memory). Restart the server.';
      this.log.error({ err }, this.failure);
      return;
    }
    this.log.error({ err }, 'the embedded database is corrupt in memory: reopening its data directory');
    const broken = this.current;
    await broken.close().catch(() => undefined);
    try {
      this.current = await this.reopen();
      this.log.warn({}, 'the embedded database was reopened');
    } catch (error) {
      this.failure = 'The embedded database failed and could not be reopened. Restart the server.';
      this.log.error({ err: error }, this.failure);
    }
  }
}

const CLOSED = 'The embedded database is closed.';

function hasSqlState(error: unknown): boolean {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
}
