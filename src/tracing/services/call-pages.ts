import { createHash } from 'node:crypto';
import type { CallsListArgs } from '../repositories/calls.js';

/** The last call of a page: its id, and its start time when the page was read. */
export interface PageEnd {
  id: string;
  startedAt: string;
}

/**
 * Where the pages of calls lists ended. weave's SDK reads a long list (`client.get_calls()`, `to_pandas()`)
 * in pages of 1,000 by `offset`, and OFFSET counts past every call before the page: at 200,000 calls the
 * last page took 340 ms against 23 ms after the page before, and reading them all took 32 s
 * (docs/benchmarks.md, "Deep pages of a calls list, and of a dataset"). A page that starts where an
 * earlier page of the same list ended starts after that page's last call instead (repositories' `after`),
 * which the index on the order seeks to, when the order allows it (seeksAfter) and the call has not moved.
 *
 * The entries are positions only (a call of the project), per app and in memory: a miss, another
 * process, or a restart only costs the OFFSET. Bounded in number and age.
 */
export class CallPageEnds {
  private readonly entries = new Map<string, { end: PageEnd; at: number }>();

  constructor(
    private readonly max = 4096,
    private readonly ttlMs = 15 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** The last call of an earlier page of `list` that ended just before `offset`. */
  get(list: string, offset: number): PageEnd | undefined {
    const key = `${list}@${offset}`;
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    if (this.now() - entry.at > this.ttlMs) return undefined;
    this.entries.set(key, entry); // most recently used last
    return entry.end;
  }

  /** Records that a page of `list` ended with the call `end` just before `offset`. */
  set(list: string, offset: number, end: PageEnd): void {
    const key = `${list}@${offset}`;
    this.entries.delete(key);
    this.entries.set(key, { end, at: this.now() });
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value!);
  }

  get size(): number {
    return this.entries.size;
  }
}

/** What makes two requests pages of the same list: the calls they select and their order, not what is read of them. */
export function listIdentity(args: CallsListArgs): string {
  const { projectId, filter, query, sortBy, expandColumns } = args;
  return createHash('sha256')
    .update(JSON.stringify([projectId, filter ?? null, query ?? null, sortBy ?? null, expandColumns ?? null]))
    .digest('hex');
}
