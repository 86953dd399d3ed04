import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { EVENT_STREAMS_PER_KEY } from '../../src/training/event-stream.js';
import { createTestApp, createUserWithKey } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { SseParser } from '../helpers/sse-parser.js';
import { call, groupGenerationA, modelWithWorker, type ModelWithWorker } from './fixtures.js';

/** One server-sent event as a client reads it. */
interface Message {
  id?: string;
  event: string;
  data: any;
}

/**
 * An open event stream read as it arrives (SseParser): `next()` is the next message (comments and `retry:`
 * kept apart), undefined once the server closed the stream. Its own connection (no keep-alive pool), which
 * `close()` ends.
 */
class StreamReader {
  private readonly parser = new SseParser();
  private readonly pending: Message[] = [];
  private ended = false;
  private wake: (() => void) | undefined;
  retry: number | undefined;
  /** Every byte of the stream as text, comments included. */
  raw = '';

  private constructor(
    readonly status: number,
    readonly headers: http.IncomingHttpHeaders,
    readonly body: string,
    private readonly request: http.ClientRequest,
  ) {}

  static open(url: string, headers: Record<string, string>): Promise<StreamReader> {
    return new Promise((resolve, reject) => {
      const request = http.get(url, { headers, agent: false }, (response) => {
        if (response.statusCode !== 200) {
          let body = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (body += chunk));
          response.on('end', () => resolve(new StreamReader(response.statusCode!, response.headers, body, request)));
          return;
        }
        const reader = new StreamReader(200, response.headers, '', request);
        response.on('data', (chunk: Buffer) => reader.push(chunk));
        response.on('close', () => reader.push(undefined));
        resolve(reader);
      });
      request.on('error', reject);
    });
  }

  private push(chunk: Buffer | undefined): void {
    if (chunk === undefined) this.ended = true;
    else {
      this.raw += chunk.toString('utf8');
      for (const event of this.parser.push(chunk)) {
        if (event.retry !== undefined) this.retry = event.retry;
        if (event.event === undefined) continue;
        this.pending.push({ ...(event.id === undefined ? {} : { id: event.id }), event: event.event, data: JSON.parse(event.data) });
      }
    }
    this.wake?.();
  }

  async next(): Promise<Message | undefined> {
    for (;;) {
      const message = this.pending.shift();
      if (message) return message;
      if (this.ended) return undefined;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Messages until `stop` says so (inclusive), or until the stream closes. */
  async until(stop: (message: Message) => boolean): Promise<Message[]> {
    const read: Message[] = [];
    for (;;) {
      const message = await this.next();
      if (!message) return read;
      read.push(message);
      if (stop(message)) return read;
    }
  }

  close(): void {
    this.request.destroy();
  }
}

let app: App;
let url: string;

beforeAll(async () => {
  app = await createTestApp();
  url = await listen(app);
});
afterAll(async () => {
  await app.close();
});

async function queuedJob(t: ModelWithWorker): Promise<string> {
  const created = await call(app, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
  expect(created.status, created.text).toBe(200);
  return created.body.id;
}

function streamUrl(jobId: string, query = ''): string {
  return `${url}/v1/preview/training-jobs/${jobId}/events/stream${query}`;
}

async function listedEvents(t: ModelWithWorker, jobId: string): Promise<{ id: string; type: string; data: unknown }[]> {
  const page = await call(app, t.user.headers, 'GET', `/v1/preview/training-jobs/${jobId}/events?limit=100`);
  expect(page.status).toBe(200);
  return page.body.data;
}

describe('training job event streams', () => {
  it('follows a job from queued to completed: the job as it changes, each event once with its id, then end', async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const stream = await StreamReader.open(streamUrl(jobId), t.user.headers);
    expect(stream.status).toBe(200);
    expect(stream.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(stream.headers['cache-control']).toBe('no-cache, no-transform');

    const first = await stream.next();
    expect(stream.retry).toBe(1000);
    expect(first).toEqual({ event: 'job', data: expect.objectContaining({ id: jobId, status: 'QUEUED' }) });

    const training = t.worker.train({ gradientSteps: 3, pauseMs: 20 });
    const rest = await stream.until((m) => m.event === 'end');
    await training;
    expect(await stream.next()).toBeUndefined(); // closed after end

    const listed = await listedEvents(t, jobId);
    expect(listed.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended']);
    const events = rest.filter((m) => m.event !== 'job' && m.event !== 'end');
    expect(events).toEqual(listed.map((e) => ({ id: e.id, event: e.type, data: e })));

    const jobs = rest.filter((m) => m.event === 'job').map((m) => m.data.status);
    expect(jobs[0]).toBe('RUNNING');
    expect(jobs.at(-1)).toBe('COMPLETED');
    const end = rest.at(-1)!;
    const current = await call(app, t.user.headers, 'GET', `/v1/preview/training-jobs/${jobId}`);
    expect(end).toEqual({ event: 'end', data: current.body });
    expect(end.data.status).toBe('COMPLETED');
  });

  it('starts after Last-Event-ID (which wins over after), from the beginning for an unknown id; a finished job closes at once', async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    await t.worker.train({ gradientSteps: 2 });
    const listed = await listedEvents(t, jobId);
    expect(listed).toHaveLength(4);
    const read = async (query: string, headers: Record<string, string> = {}) => {
      const stream = await StreamReader.open(streamUrl(jobId, query), { ...t.user.headers, ...headers });
      return (await stream.until(() => false)).map((m) => m.id ?? m.event);
    };
    const ids = listed.map((e) => e.id);

    expect(await read('')).toEqual(['job', ...ids, 'end']);
    expect(await read(`?after=${ids[1]}`)).toEqual(['job', ids[2], ids[3], 'end']);
    expect(await read(`?after=${ids[0]}`, { 'last-event-id': ids[2] })).toEqual(['job', ids[3], 'end']);
    expect(await read('', { 'last-event-id': ids[3] })).toEqual(['job', 'end']);
    expect(await read('?after=not-an-event')).toEqual(['job', ...ids, 'end']);
  });

  it('ends a canceled queued job with its training_failed event', async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const stream = await StreamReader.open(streamUrl(jobId), t.user.headers);
    expect((await stream.next())?.data.status).toBe('QUEUED');
    const canceled = await call(app, t.user.headers, 'POST', `/v1/preview/training-jobs/${jobId}/cancel`);
    expect(canceled.status).toBe(200);
    const rest = await stream.until(() => false);
    expect(rest.map((m) => m.event)).toEqual(['job', 'training_failed', 'end']);
    expect(rest[1].data.data).toEqual({ error_message: canceled.body.error_message });
    expect(rest[2].data.status).toBe('CANCELED');
  });

  it("answers another tenant's or an unknown job with the training API's 404, and needs a key", async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const stranger = await createUserWithKey(app);
    const refused = await StreamReader.open(streamUrl(jobId), stranger.headers);
    expect(refused.status).toBe(404);
    expect(JSON.parse(refused.body)).toEqual({ detail: `training job ${jobId} not found` });

    const unknown = crypto.randomUUID();
    const missing = await StreamReader.open(streamUrl(unknown), t.user.headers);
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body)).toEqual({ detail: `training job ${unknown} not found` });

    const anonymous = await StreamReader.open(streamUrl(jobId), {});
    expect(anonymous.status).toBe(401);

    // A refused stream holds no slot of its key.
    for (let i = 0; i < EVENT_STREAMS_PER_KEY; i++) expect((await StreamReader.open(streamUrl(unknown), t.user.headers)).status).toBe(404);
    const own = await StreamReader.open(streamUrl(jobId), t.user.headers);
    expect(own.status).toBe(200);
    own.close();
  });

  it(`holds at most ${EVENT_STREAMS_PER_KEY} open streams per key: 429 with Retry-After beyond, a slot again once one closes`, async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const open: StreamReader[] = [];
    for (let i = 0; i < EVENT_STREAMS_PER_KEY; i++) {
      const stream = await StreamReader.open(streamUrl(jobId), t.user.headers);
      expect(stream.status).toBe(200);
      await stream.next();
      open.push(stream);
    }
    const refused = await StreamReader.open(streamUrl(jobId), t.user.headers);
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('5');
    expect(JSON.parse(refused.body)).toEqual({
      detail: `This key already has ${EVENT_STREAMS_PER_KEY} training job event streams open; close one, or try again after Retry-After seconds.`,
    });
    // Another key of the same user has slots of its own.
    const { key: second } = await app.auth.createKey({ username: t.user.username });
    const beside = await StreamReader.open(streamUrl(jobId), { authorization: `Bearer ${second}` });
    expect(beside.status).toBe(200);
    beside.close();

    open.pop()!.close();
    let again: StreamReader | undefined;
    for (let tries = 0; tries < 100; tries++) {
      again = await StreamReader.open(streamUrl(jobId), t.user.headers);
      if (again.status !== 429) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(again!.status).toBe(200);
    again!.close();
    for (const stream of open) stream.close();
  });

  it('resumed at the last event, sends only what comes after it', async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const claimed = (await t.worker.claim(5))!;
    expect((await t.worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 2 } }])).status).toBe(200);
    expect((await t.worker.events(claimed, [{ type: 'gradient_step', data: { loss: 0.5 } }])).status).toBe(200);
    const seen = await listedEvents(t, jobId);
    const stream = await StreamReader.open(streamUrl(jobId), { ...t.user.headers, 'last-event-id': seen[1].id });
    expect((await stream.next())?.data.status).toBe('RUNNING');
    expect((await t.worker.events(claimed, [{ type: 'gradient_step', data: { loss: 0.25 } }])).status).toBe(200);
    expect((await t.worker.complete(claimed)).status).toBe(200);
    const rest = await stream.until(() => false);
    const listed = await listedEvents(t, jobId);
    expect(rest.filter((m) => m.id !== undefined).map((m) => m.id)).toEqual(listed.slice(2).map((e) => e.id));
    expect(rest.at(-1)?.event).toBe('end');
  });

  it('closes after max_seconds without end while the job runs on, and refuses a max_seconds out of range', async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const stream = await StreamReader.open(streamUrl(jobId, '?max_seconds=1'), t.user.headers);
    expect(await stream.until(() => false)).toEqual([{ event: 'job', data: expect.objectContaining({ status: 'QUEUED' }) }]);
    const refused = await StreamReader.open(streamUrl(jobId, '?max_seconds=601'), t.user.headers);
    expect(refused.status).toBe(422);
    expect(JSON.parse(refused.body).detail[0]).toMatchObject({ type: 'less_than_equal', loc: ['query', 'max_seconds'] });
  });

  it('ends the stream when its key is revoked', async () => {
    const t = await modelWithWorker(app);
    const jobId = await queuedJob(t);
    const stream = await StreamReader.open(streamUrl(jobId), t.user.headers);
    expect((await stream.next())?.event).toBe('job');
    await app.auth.revokeKey({ keyId: t.user.keyId });
    expect(await stream.until(() => false)).toEqual([]);
  });
});

describe('training job event stream keep-alives', () => {
  it('sends a keep-alive comment after SSE_KEEPALIVE_MS without a message, and none with 0', async () => {
    for (const [keepAlive, expected] of [['100', true], ['0', false]] as const) {
      const own = await createTestApp({ SSE_KEEPALIVE_MS: keepAlive });
      try {
        const ownUrl = await listen(own);
        const t = await modelWithWorker(own);
        const created = await call(own, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
        const stream = await StreamReader.open(`${ownUrl}/v1/preview/training-jobs/${created.body.id}/events/stream?max_seconds=1`, t.user.headers);
        expect(await stream.until(() => false)).toEqual([{ event: 'job', data: expect.objectContaining({ status: 'QUEUED' }) }]);
        expect(stream.raw.includes('\n\n: keep-alive\n\n'), `SSE_KEEPALIVE_MS=${keepAlive}`).toBe(expected);
      } finally {
        await own.close();
      }
    }
  });
});

describe('training job event streams at shutdown', () => {
  it('closes open streams when the app closes, without waiting for the job', async () => {
    const own = await createTestApp();
    const ownUrl = await listen(own);
    const t = await modelWithWorker(own);
    const created = await call(own, t.user.headers, 'POST', '/v1/preview/training-jobs', { model_id: t.model.id, trajectory_groups: [groupGenerationA()] });
    const stream = await StreamReader.open(`${ownUrl}/v1/preview/training-jobs/${created.body.id}/events/stream`, t.user.headers);
    expect((await stream.next())?.event).toBe('job');
    const closing = own.close();
    expect(await stream.until(() => false)).toEqual([]);
    await closing;
  });
});
