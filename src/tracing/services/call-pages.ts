import { createHash } from 'node:crypto';
import type { CallPosition } from '../query/calls.js';
import type { CallsListArgs } from '../repositories/calls.js';

/**
 * Where the pages of calls lists ended. weave's SDK reads a long list (`client.get_calls()`, `to_pandas()`)
 * in pages of 1,000 by `offset`, and OFFSET counts past every call before the page: at 200,000 calls the
 * last page took 340 ms against 23 ms after the page before, and reading them all took 32 s
 * (docs/benchmarks.md, "Deep pages of a calls list, and of a dataset"). A page that starts where an
 * earlier page of the same list ended starts after where that page's last call was instead (repositories'
 * `after`), which the index on the order seeks to, when the order allows it (seeksAfter).
 *
 * The entries are positions only (a call's id and start time), per app and in memory: a miss, another
 * process, or a restart only costs the OFFSET. Bounded in number and age.
 */
export class CallPageEnds {
  private readonly entries = new Map<string, { end: CallPosition; at: number }>();

  constructor(
    private readonly max = 4096,
    private readonly ttlMs = 15 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Where the last call of an earlier page of `list` that ended just before `offset` was. */
  get(list: string, offset: number): CallPosition | undefined {
    const key = `${list}@${offset}`;
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    if (this.now() - entry.at > this.ttlMs) return undefined;
    this.entries.set(key, entry); // most recently used last
    return entry.end;
  }

  /** Records that a page of `list` ended just before `offset`, with a call at `end`. */
  set(list: string, offset: number, end: CallPosition): void {
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
