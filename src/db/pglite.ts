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
 */
export class EmbeddedPglite {
  private failure: string | undefined;
  private recovering: Promise<void> | undefined;

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
      if (!hasSqlState(error)) await this.verify(error);
      throw error;
    }
  }

  /** `COPY ... FROM '/dev/blob'` with `data` as the input (PostgreSQL's text format, for instance). */
  async copyFrom(text: string, data: string): Promise<void> {
    this.throwIfFailed();
    try {
      await this.current.query(text, [], { blob: data });
    } catch (error) {
      if (!hasSqlState(error)) await this.verify(error);
      throw error;
    }
  }

  /**
   * Probes the instance and replaces it when corrupt. Resolves when it works (as it is or reopened);
   * throws when it was corrupt, even if the reopen succeeded, so a system check reports the fault.
   */
  async check(): Promise<void> {
    this.throwIfFailed();
    if (await this.probe()) return;
    await this.recover(new Error('probe read back no rows'));
    throw new DatabaseUnavailable('The embedded database answered a probe wrongly and was reopened.');
  }

  async close(): Promise<void> {
    await this.current.close();
  }

  private throwIfFailed(): void {
    if (this.failure) throw new DatabaseUnavailable(this.failure);
  }

  private async verify(cause: unknown): Promise<void> {
    if (!(await this.probe())) await this.recover(cause);
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

function hasSqlState(error: unknown): boolean {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
}
