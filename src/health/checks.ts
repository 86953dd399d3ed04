/**
 * The components `/v1/system-check` reports. Each area registers the checks it owns; a check throws
 * (or times out) to fail, and may return extra fields (a queue depth, say) to show beside the result.
 */
export interface CheckResult {
  success: boolean;
  duration_ms: number;
  error?: string;
  [extra: string]: unknown;
}

export type Check = () => Promise<Record<string, unknown> | void>;

/** Whether every check of a run passed: `/v1/system-check` answers 200 then, and 503 otherwise. */
export const allPassed = (results: Record<string, CheckResult>): boolean => Object.values(results).every((result) => result.success);

export class SystemChecks {
  private readonly checks = new Map<string, { check: Check; usesDatabase: boolean }>();
  private databaseHold: () => Date | undefined = () => undefined;

  constructor(private readonly timeoutMs: number) {}

  /**
   * Adds a check, or replaces the one of that name. A check that `usesDatabase` is not run while the
   * database is held (`holdDatabaseWith`): it would only wait for it.
   */
  register(name: string, check: Check, options: { usesDatabase?: boolean } = {}): void {
    this.checks.set(name, { check, usesDatabase: options.usesDatabase ?? false });
  }

  /** Says since when something (a backup) holds the database on purpose, or undefined. */
  holdDatabaseWith(since: () => Date | undefined): void {
    this.databaseHold = since;
  }

  async run(): Promise<Record<string, CheckResult>> {
    const held = this.databaseHold();
    const entries = await Promise.all(
      [...this.checks].map(async ([name, { check, usesDatabase }]) => {
        if (usesDatabase && held !== undefined) return [name, { success: true, duration_ms: 0, database_held_by_backup_since: held.toISOString() }] as const;
        return [name, await this.runOne(check)] as const;
      }),
    );
    return Object.fromEntries(entries);
  }

  private async runOne(check: Check): Promise<CheckResult> {
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${this.timeoutMs} ms`)), this.timeoutMs);
    });
    try {
      const extra = (await Promise.race([check(), timeout])) ?? {};
      return { success: true, duration_ms: elapsed(started), ...extra };
    } catch (error) {
      return { success: false, duration_ms: elapsed(started), error: error instanceof Error ? error.message : String(error) };
    } finally {
      clearTimeout(timer);
    }
  }
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 1000) / 1000;
}
