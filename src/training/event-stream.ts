import { Readable } from 'node:stream';
import type { Principal } from '../auth/principal.js';
import { RateLimitedError } from '../errors.js';
import type { JobSignal } from './job-signal.js';
import { KeySlots } from './key-slots.js';
import type { PageOf, TrainingJob, TrainingJobEvent } from './schemas.js';
import type { TrainingService } from './service.js';

/** Open event streams one API key may hold in one trainyard process; the next answers 429. */
export const EVENT_STREAMS_PER_KEY = 16;
/** Retry-After of a stream refused because its key holds EVENT_STREAMS_PER_KEY. */
export const EVENT_STREAM_BUSY_RETRY_SECONDS = 5;
/** How often a stream reads the job again when nothing in this process woke it (another process's change). */
const EVENT_STREAM_POLL_MS = 1000;
/** What EventSource waits before it reconnects (the `retry:` field). */
const RETRY_MS = 1000;
const PAGE = 100;
const FINISHED = new Set<TrainingJob['status']>(['COMPLETED', 'FAILED', 'CANCELED']);

export interface JobEventStreamsDeps {
  service: TrainingService;
  /** Notified in this process when a job's events or status may have changed. */
  changes: JobSignal;
  /** The key's principal now (undefined: revoked); a stream ends when its key no longer reaches the job. */
  currentPrincipal: (keyId: string) => Promise<Principal | undefined>;
  /**
   * A comment line after this long without a message, so that proxies and clients do not take the stream
   * for dead (SSE_KEEPALIVE_MS; 0: never).
   */
  keepAliveMs: number;
}

/**
 * Server-sent events of training jobs (docs/training.md#event-streams): the job (`job`, whenever it
 * changed), each event once in append order (`id:` its id, `event:` its type), and `end` after the last
 * event of a finished job. Counts the streams each key holds, and ends them all when the app closes.
 */
export class JobEventStreams {
  /** Open streams by API key. */
  private readonly slots = new KeySlots(EVENT_STREAMS_PER_KEY);
  private readonly running = new Set<AbortController>();
  private closed = false;

  constructor(private readonly deps: JobEventStreamsDeps) {}

  /**
   * A stream of the job's events after `after` (an unknown or absent one: from the first), for at most
   * `maxSeconds`. Throws before anything is sent: 404 when the key does not reach the job, 429 when it
   * holds EVENT_STREAMS_PER_KEY streams. `clientGone` ends it.
   */
  async open(principal: Principal, jobId: string, options: { after: string | undefined; maxSeconds: number }, clientGone: AbortSignal): Promise<Readable> {
    const { after } = options;
    // The slot is taken before the first read, so that streams opening at once cannot pass the bound.
    this.slots.take(
      principal.keyId,
      () =>
        new RateLimitedError(
          `This key already has ${EVENT_STREAMS_PER_KEY} training job event streams open; close one, or try again after Retry-After seconds.`,
          { retryAfterSeconds: EVENT_STREAM_BUSY_RETRY_SECONDS },
        ),
    );
    let first: { job: TrainingJob; events: PageOf<TrainingJobEvent> };
    try {
      first = await this.deps.service.jobAndEvents(principal, jobId, { after, limit: PAGE });
    } catch (error) {
      this.slots.free(principal.keyId);
      throw error;
    }
    const stop = new AbortController();
    this.running.add(stop);
    const end = () => stop.abort();
    clientGone.addEventListener('abort', end, { once: true });
    if (clientGone.aborted || this.closed) stop.abort();

    const until = Date.now() + options.maxSeconds * 1000;
    const stream = Readable.from(this.messages(principal, jobId, after, until, first, stop.signal), { objectMode: false });
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      stop.abort();
      clientGone.removeEventListener('abort', end);
      this.running.delete(stop);
      this.slots.free(principal.keyId);
    };
    stream.once('close', release);
    stop.signal.addEventListener('abort', () => {
      // A stream never read (the client left before the first write) would not close on its own.
      if (!stream.readableFlowing) stream.destroy();
    });
    return stream;
  }

  /** Ends every stream (the app is closing). */
  close(): void {
    this.closed = true;
    for (const stop of this.running) stop.abort();
  }

  private async *messages(
    principal: Principal,
    jobId: string,
    from: string | undefined,
    until: number,
    first: { job: TrainingJob; events: PageOf<TrainingJobEvent> },
    stop: AbortSignal,
  ): AsyncGenerator<string> {
    const { service, changes, currentPrincipal, keepAliveMs } = this.deps;
    let shownJob = '';
    // The client's cursor until an event is sent: an unknown one reads from the first event each time.
    let after = from;
    let lastWrite = Date.now();
    let read = first;
    yield `retry: ${RETRY_MS}\n\n`;
    for (;;) {
      const job = JSON.stringify(read.job);
      if (job !== shownJob) {
        shownJob = job;
        lastWrite = Date.now();
        yield message('job', job);
      }
      for (const event of read.events.data) {
        after = event.id;
        lastWrite = Date.now();
        yield message(event.type, JSON.stringify(event), event.id);
      }
      const more = read.events.has_more;
      if (!more && FINISHED.has(read.job.status)) {
        yield message('end', job);
        return;
      }
      if (!more) {
        const seen = changes.version;
        while (!stop.aborted && Date.now() < until && seen === changes.version) {
          const quiet = keepAliveMs === 0 ? Infinity : keepAliveMs - (Date.now() - lastWrite);
          if (quiet <= 0) {
            lastWrite = Date.now();
            yield ': keep-alive\n\n';
            continue;
          }
          await changes.wait(Math.min(EVENT_STREAM_POLL_MS, quiet, until - Date.now()), seen, stop);
          break;
        }
      }
      if (stop.aborted || Date.now() >= until) return;
      // The key may have been revoked, or its user taken out of a team, since the stream opened.
      const now = await currentPrincipal(principal.keyId);
      if (!now || stop.aborted) return;
      try {
        read = await service.jobAndEvents(now, jobId, { after, limit: PAGE });
      } catch {
        // Gone (the model was deleted) or unreadable now: the stream ends, and a reconnect says why.
        return;
      }
    }
  }
}

/** One server-sent event; `data` is one line of JSON (JSON.stringify writes no line breaks). */
function message(event: string, data: string, id?: string): string {
  return `${id === undefined ? '' : `id: ${id}\n`}event: ${event}\ndata: ${data}\n\n`;
}
