import { afterEach, describe, expect, it } from 'vitest';
import { BackendClient, type UpstreamResponse } from '../../src/inference/proxy/client.js';
import { EngineError, EngineFault, RequestAbortedError, StreamInterruptedError } from '../../src/inference/proxy/errors.js';
import { SseParser } from '../helpers/sse-parser.js';
import { Cancel } from '../../src/inference/proxy/cancel.js';
import { relayStream, type RelayOutcome } from '../../src/inference/stream.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startFakeEngine, type FakeEngine, type FakeEngineOptions } from '../fakes/engine.js';
import { startBlackhole } from './blackhole.js';
import { backendFor, chatBody, deadUrl, waitFor } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

async function engine(options: FakeEngineOptions = {}): Promise<FakeEngine> {
  const started = await startFakeEngine(options);
  cleanups.push(() => started.close());
  return started;
}

function client(...args: ConstructorParameters<typeof BackendClient>): BackendClient {
  const created = new BackendClient(...args);
  cleanups.push(() => created.close());
  return created;
}

const send = (c: BackendClient, overrides: Record<string, unknown> = {}, signal?: AbortSignal) =>
  c.send({ path: '/v1/chat/completions', body: chatBody(overrides), signal });

/** The whole upstream body, parsed. */
const json = async (response: UpstreamResponse): Promise<unknown> => JSON.parse((await response.bytes()).toString());

async function events(body: AsyncIterable<Buffer>): Promise<string[]> {
  const parser = new SseParser();
  const data: string[] = [];
  for await (const chunk of body) data.push(...parser.push(chunk).map((e) => e.data));
  return data;
}

describe('BackendClient requests', () => {
  it('returns a non-streaming completion', async () => {
    const e = await engine();
    const response = await send(client(backendFor([e.url])));
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject({ object: 'chat.completion', choices: [{ message: { content: 'Hello from the' } }] });
  });

  it('streams the engine chunks through in order, ending with [DONE]', async () => {
    const e = await engine({ chunks: 4 });
    const response = await send(client(backendFor([e.url])), { stream: true, stream_options: { include_usage: true } });
    const data = await events(response.body);
    expect(data).toHaveLength(1 + 4 + 1 + 1 + 1);
    expect(JSON.parse(data[data.length - 2])).toMatchObject({ choices: [], usage: { completion_tokens: 4 } });
    expect(data[data.length - 1]).toBe('[DONE]');
  });

  it('sends the body, the extra headers and the backend key upstream', async () => {
    const e = await engine({ apiKey: 'k-1' });
    const c = client(backendFor([e.url], { apiKey: 'k-1' }));
    await json(await c.send({ path: '/v1/chat/completions', body: chatBody({ vllm_xargs: { a: 1 } }), headers: { 'x-request-id': 'req-9' } }));
    expect(e.requests[0]).toMatchObject({ headers: { authorization: 'Bearer k-1', 'x-request-id': 'req-9', 'content-type': 'application/json' }, body: { vllm_xargs: { a: 1 } } });
  });

  it('serves a replica behind a path prefix', async () => {
    const e = await engine();
    const c = client(backendFor([`${e.url}/engine-a`]));
    await expect(send(c)).rejects.toMatchObject({ statusCode: 404 });
    expect(e.requests[0].path).toBe('/engine-a/v1/chat/completions');
  });

  it('turns an engine 4xx into an EngineError with its status, message and param', async () => {
    const e = await engine();
    const error = await send(client(backendFor([e.url])), { model: 'nope' }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ statusCode: 404, code: 'model_not_found', param: 'model', message: 'The model `nope` does not exist.' });
  });

  it('turns an engine 401 (its plain auth error) into a 502 upstream_unauthorized naming the key variable, not the caller\'s 401', async () => {
    const e = await engine({ apiKey: 'right' });
    const error = await send(client(backendFor([e.url], { apiKey: 'wrong', apiKeyEnv: 'VLLM_KEY' }))).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineFault);
    expect(error).toMatchObject({
      statusCode: 502,
      code: 'upstream_unauthorized',
      message: "The engine refused the gateway's credentials; the operator has to fix the gateway's configuration (the server log says how).",
      detail: `replica ${e.url} of backend test-backend refused the gateway's credentials (401: Unauthorized); check that VLLM_KEY holds the key the engine was started with (--api-key)`,
    });
    const keyless = await send(client(backendFor([e.url]))).catch((err: unknown) => err);
    expect(keyless).toMatchObject({
      statusCode: 502,
      code: 'upstream_unauthorized',
      detail: `replica ${e.url} of backend test-backend refused the gateway's credentials (401: Unauthorized); the backend has no api_key_env; set it to the variable holding the engine's --api-key`,
    });
  });

  it('releases the replica once a response has been read', async () => {
    const e = await engine();
    const c = client(backendFor([e.url]));
    await (await send(c, { stream: true })).bytes();
    await waitFor(() => c.replicas[0].outstanding === 0);
  });

  it('lists the models a replica serves, adapters included', async () => {
    const e = await engine({ models: ['base-a', 'base-b'] });
    e.adapters.set('lora-1', '/ckpt/1');
    const models = await client(backendFor([e.url])).listModels();
    expect(models.map((m) => [m.id, m.parent])).toEqual([['base-a', null], ['base-b', null], ['lora-1', 'base-a']]);
  });
});

describe('BackendClient balancing and retries', () => {
  it('sends a request to the replica with fewer requests in flight', async () => {
    const [a, b] = [await engine(), await engine()];
    const c = client(backendFor([a.url, b.url]));
    a.setBehaviour({ kind: 'hang' });
    b.setBehaviour({ kind: 'hang' });
    const controller = new AbortController();
    const pending = [send(c, {}, controller.signal), send(c, {}, controller.signal)].map((p) => p.catch(() => undefined));
    await waitFor(() => a.requests.length + b.requests.length === 2);
    expect([a.requests.length, b.requests.length]).toEqual([1, 1]);
    controller.abort();
    await Promise.all(pending);
  });

  it('retries on another replica when one answers 503', async () => {
    const [a, b] = [await engine(), await engine()];
    a.setBehaviour({ kind: 'status', status: 503 });
    b.setBehaviour({ kind: 'status', status: 503 });
    const c = client(backendFor([a.url, b.url]));
    b.setBehaviour({ kind: 'ok' });
    // Whichever replica is tried first, the 503 one must hand over to the other.
    const response = await send(c);
    expect(response.status).toBe(200);
    expect(b.chatRequests()).toHaveLength(1);
  });

  it('retries on another replica when one refuses connections', async () => {
    const b = await engine();
    const c = client(backendFor([await deadUrl(startFakeEngine), b.url]));
    for (let i = 0; i < 4; i++) expect((await send(c)).status).toBe(200);
    expect(b.chatRequests()).toHaveLength(4);
  });

  it('answers 503 when no replica can be reached', async () => {
    const c = client(backendFor([await deadUrl(startFakeEngine), await deadUrl(startFakeEngine)]));
    const error = await send(c).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineFault);
    expect(error).toMatchObject({ statusCode: 503, code: 'upstream_unreachable' });
  });

  it('does not retry an engine 500, and keeps its status and message', async () => {
    const [a, b] = [await engine(), await engine()];
    a.setBehaviour({ kind: 'status', status: 500 });
    b.setBehaviour({ kind: 'status', status: 500 });
    const error = await send(client(backendFor([a.url, b.url]))).catch((err: unknown) => err);
    expect(error).toMatchObject({ statusCode: 500, code: 'engine_error', message: 'fake engine failure 500' });
    expect(a.chatRequests().length + b.chatRequests().length).toBe(1);
  });

  it('does not retry an engine 4xx', async () => {
    const [a, b] = [await engine(), await engine()];
    a.setBehaviour({ kind: 'status', status: 400 });
    b.setBehaviour({ kind: 'status', status: 400 });
    await expect(send(client(backendFor([a.url, b.url])))).rejects.toBeInstanceOf(EngineError);
    expect(a.chatRequests().length + b.chatRequests().length).toBe(1);
  });

  it('waits out a short Retry-After before retrying the only replica', async () => {
    const e = await engine();
    e.setBehaviour({ kind: 'status', status: 429, retryAfter: '1' }, 1);
    const started = Date.now();
    expect((await send(client(backendFor([e.url])))).status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(e.chatRequests()).toHaveLength(2);
  });

  it('passes a 429 with a long Retry-After on to the caller', async () => {
    const e = await engine();
    e.setBehaviour({ kind: 'status', status: 429, retryAfter: '120', message: 'Too many requests' });
    const error = await send(client(backendFor([e.url]))).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ statusCode: 429, code: 'rate_limit_exceeded', retryAfterMs: 120_000 });
    expect(e.chatRequests()).toHaveLength(1);
  });

  it('stops sending to a replica whose circuit opened, until a probe succeeds', async () => {
    const [a, b] = [await engine(), await engine()];
    let now = 1_000_000;
    const c = client(backendFor([a.url, b.url]), { breaker: { failureThreshold: 2, openMs: 5_000 }, now: () => now });
    a.setBehaviour({ kind: 'status', status: 500 });
    for (let i = 0; i < 4; i++) await send(c).catch(() => undefined);
    expect(a.chatRequests()).toHaveLength(2);
    expect(c.replicas[0].breaker.state).toBe('open');

    for (let i = 0; i < 4; i++) expect((await send(c)).status).toBe(200);
    expect(a.chatRequests()).toHaveLength(2);

    now += 5_000;
    a.setBehaviour({ kind: 'ok' });
    expect(c.replicas[0].breaker.state).toBe('half-open');
    for (let i = 0; i < 4; i++) await json(await send(c));
    expect(a.chatRequests().length).toBeGreaterThan(2);
    expect(c.replicas[0].breaker.state).toBe('closed');
  });

  it('answers 503 at once when every circuit is open', async () => {
    const e = await engine();
    const c = client(backendFor([e.url]), { breaker: { failureThreshold: 1, openMs: 60_000 } });
    e.setBehaviour({ kind: 'status', status: 500 });
    await send(c).catch(() => undefined);
    const error = await send(c).catch((err: unknown) => err);
    expect(error).toMatchObject({ statusCode: 503, code: 'upstream_unavailable' });
    expect(e.chatRequests()).toHaveLength(1);
  });
});

describe('BackendClient timeouts', () => {
  it('gives up with 504 when the first byte does not come in time, and hangs up', async () => {
    const e = await engine();
    e.setBehaviour({ kind: 'hang' });
    const error = await send(client(backendFor([e.url], { timeouts: { firstByteMs: 200 } }))).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineFault);
    expect(error).toMatchObject({ statusCode: 504, code: 'upstream_timeout', message: expect.stringContaining('first byte') });
    await waitFor(() => e.disconnects.length === 1);
  });

  it('counts headers without a body as no first byte', async () => {
    const e = await engine();
    e.setBehaviour({ kind: 'hang-after-headers' });
    const error = await send(client(backendFor([e.url], { timeouts: { firstByteMs: 200 } })), { stream: true }).catch((err: unknown) => err);
    expect(error).toMatchObject({ statusCode: 504, code: 'upstream_timeout' });
  });

  it('interrupts a stream that goes idle between chunks', async () => {
    const e = await engine({ chunks: 5 });
    e.setBehaviour({ kind: 'stall-after', chunks: 2 });
    const response = await send(client(backendFor([e.url], { timeouts: { idleMs: 200 } })), { stream: true });
    const error = await events(response.body).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(StreamInterruptedError);
    expect(error).toMatchObject({ statusCode: 504, message: expect.stringContaining('idle timeout') });
    await waitFor(() => e.disconnects.length === 1);
  });

  it('interrupts a stream that outlasts the total timeout though chunks keep coming', async () => {
    const e = await engine({ chunks: 20, chunkDelayMs: 50 });
    const response = await send(client(backendFor([e.url], { timeouts: { totalMs: 300, idleMs: 5_000 } })), { stream: true });
    const error = await events(response.body).catch((err: unknown) => err);
    expect(error).toMatchObject({ statusCode: 504, message: expect.stringContaining('total timeout') });
  });

  it('reports a connection broken mid-stream as an interruption, not a timeout', async () => {
    const e = await engine({ chunks: 5 });
    e.setBehaviour({ kind: 'drop-after', chunks: 2 });
    const response = await send(client(backendFor([e.url])), { stream: true });
    const error = await events(response.body).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(StreamInterruptedError);
    expect(error).toMatchObject({ statusCode: 502 });
  });

  it('passes a vLLM in-stream error event through as data', async () => {
    const e = await engine({ chunks: 5 });
    e.setBehaviour({ kind: 'error-event-after', chunks: 1 });
    const data = await events((await send(client(backendFor([e.url])), { stream: true })).body);
    expect(data.slice(-2)).toEqual([expect.stringContaining('"error"'), '[DONE]']);
  });

  it('gives up on a connection that cannot be made within the connect timeout', async () => {
    const blackhole = await startBlackhole();
    cleanups.push(() => blackhole.close());
    const started = Date.now();
    const error = await send(client(backendFor([blackhole.url], { timeouts: { connectMs: 200 } }))).catch((err: unknown) => err);
    expect(error).toMatchObject({ statusCode: 503, code: 'upstream_unreachable', message: 'The engine serving this model could not be reached; try again shortly.', detail: expect.stringMatching(/^could not connect to replica/) });
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('retries on another replica when one cannot be connected to in time', async () => {
    const blackhole = await startBlackhole();
    cleanups.push(() => blackhole.close());
    const b = await engine();
    const c = client(backendFor([blackhole.url, b.url], { timeouts: { connectMs: 200 } }));
    for (let i = 0; i < 2; i++) expect((await send(c)).status).toBe(200);
    expect(b.chatRequests()).toHaveLength(2);
  });
});

describe('BackendClient cancellation', () => {
  it('aborts the upstream request when the caller aborts before the first byte', async () => {
    const e = await engine();
    e.setBehaviour({ kind: 'hang' });
    const controller = new AbortController();
    const pending = send(client(backendFor([e.url])), {}, controller.signal);
    await waitFor(() => e.chatRequests().length === 1);
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(RequestAbortedError);
    await waitFor(() => e.disconnects.length === 1);
    expect(e.disconnects[0].chunksSent).toBe(0);
  });

  it('aborts a stream before its first token when the caller aborts', async () => {
    const e = await engine();
    e.setBehaviour({ kind: 'hang-after-headers' });
    const controller = new AbortController();
    const pending = send(client(backendFor([e.url])), { stream: true }, controller.signal);
    await waitFor(() => e.chatRequests().length === 1);
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(RequestAbortedError);
    await waitFor(() => e.disconnects.length === 1);
  });

  it('aborts a stream mid-way when the caller aborts', async () => {
    const e = await engine({ chunks: 50, chunkDelayMs: 20 });
    const controller = new AbortController();
    const response = await send(client(backendFor([e.url])), { stream: true }, controller.signal);
    let seen = 0;
    const error = await (async () => {
      for await (const _ of response.body) if (++seen === 3) controller.abort();
    })().catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RequestAbortedError);
    await waitFor(() => e.disconnects.length === 1);
    expect(e.disconnects[0].chunksSent).toBeLessThan(50);
  });

  it('aborts the upstream request when the consumer stops reading', async () => {
    const e = await engine({ chunks: 50, chunkDelayMs: 20 });
    const c = client(backendFor([e.url]));
    const response = await send(c, { stream: true });
    for await (const _ of response.body) break;
    await waitFor(() => e.disconnects.length === 1);
    await waitFor(() => c.replicas[0].outstanding === 0);
  });

  it('aborts the upstream request when the response is discarded', async () => {
    const e = await engine({ chunks: 50, chunkDelayMs: 20 });
    const response = await send(client(backendFor([e.url])), { stream: true });
    response.discard();
    await waitFor(() => e.disconnects.length === 1);
  });

  it('refuses to start when the signal has already fired', async () => {
    const e = await engine();
    await expect(send(client(backendFor([e.url])), {}, AbortSignal.abort())).rejects.toBeInstanceOf(RequestAbortedError);
    expect(e.requests).toHaveLength(0);
  });
});

describe('BackendClient breaker accounting and timeouts', () => {
  it('does not count a request it could not build (an invalid header) against the replica', async () => {
    const e = await engine();
    const c = client(backendFor([e.url]), { breaker: { failureThreshold: 2, openMs: 60_000 } });
    for (const id of ['日本', 'a\nb', 'a\rb']) {
      const error = await c.send({ path: '/v1/chat/completions', body: chatBody(), headers: { 'x-request-id': id } }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(EngineFault);
      expect(error).toMatchObject({ statusCode: 502, code: 'upstream_error' });
    }
    expect(c.replicas[0].breaker.state).toBe('closed');
    expect(e.chatRequests()).toHaveLength(0);
    expect((await send(c)).status).toBe(200);
  });

  it('waits for a non-streaming completion past the first-byte timeout, bounded by the total one', async () => {
    const e = await engine({ latencyMs: 400 });
    const c = client(backendFor([e.url], { timeouts: { firstByteMs: 100, totalMs: 2_000 } }), { breaker: { failureThreshold: 1, openMs: 60_000 } });
    const response = await c.send({ path: '/v1/chat/completions', body: chatBody(), wholeBody: true });
    expect(await json(response)).toMatchObject({ object: 'chat.completion', choices: [{ message: { content: 'Hello from the' } }] });
    expect(c.replicas[0].breaker.state).toBe('closed');
  });

  it('does not hold a total timeout of a non-streaming completion against the replica', async () => {
    const e = await engine({ latencyMs: 1_000 });
    const c = client(backendFor([e.url], { timeouts: { firstByteMs: 100, totalMs: 300 } }), { breaker: { failureThreshold: 1, openMs: 60_000 } });
    const error = await c.send({ path: '/v1/chat/completions', body: chatBody(), wholeBody: true }).catch((err: unknown) => err);
    expect(error).toMatchObject({
      statusCode: 504,
      code: 'upstream_timeout',
      message: 'The engine sent nothing within the total timeout of 300 ms.',
      detail: `replica ${e.url} of backend test-backend sent nothing within the total timeout of 300 ms`,
    });
    expect(c.replicas[0].breaker.state).toBe('closed');
  });

  it('does not time out, or blame the engine, when the consumer reads slowly while chunks keep arriving', async () => {
    const e = await engine({ chunks: 30, chunkDelayMs: 10 });
    const c = client(backendFor([e.url], { timeouts: { idleMs: 150 } }), { breaker: { failureThreshold: 1, openMs: 60_000 } });
    const response = await send(c, { stream: true });
    const data: string[] = [];
    const parser = new SseParser();
    let first = true;
    for await (const chunk of response.body) {
      data.push(...parser.push(chunk).map((event) => event.data));
      // A client that stops reading for longer than the idle timeout while the engine goes on.
      if (first) await new Promise((resolve) => setTimeout(resolve, 600));
      first = false;
    }
    expect(data.at(-1)).toBe('[DONE]');
    expect(data.filter((d) => d.includes('"content"'))).toHaveLength(1 + 30 + 1);
    expect(c.replicas[0].breaker.state).toBe('closed');
  });
});

describe('BackendClient bodies that end with their first chunk', () => {
  /** An engine that writes its whole answer at once, so the body has ended by the time anyone reads it. */
  async function oneWrite(contentType: string, body: string): Promise<string> {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': contentType, 'content-length': Buffer.byteLength(body) }).end(body));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(() => resolve())));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  it('reads a whole JSON body', async () => {
    const url = await oneWrite('application/json', '{"object":"chat.completion","choices":[]}');
    const response = await send(client(backendFor([url])));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await response.bytes()).toString()).toBe('{"object":"chat.completion","choices":[]}');
  });

  it('relays a whole stream and ends it', async () => {
    const sse = 'data: {"id":"a","model":"m","choices":[{"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n';
    const url = await oneWrite('text/event-stream', sse);
    const response = await send(client(backendFor([url])), { stream: true });
    await new Promise((resolve) => setTimeout(resolve, 20));
    let outcome: RelayOutcome | undefined;
    const relayed = relayStream(response.body, { model: 'm', clientWantsUsage: false, signal: new Cancel(), onEnd: (o) => (outcome = o) });
    const parts: Buffer[] = [];
    for await (const part of relayed) parts.push(part as Buffer);
    expect(Buffer.concat(parts).toString()).toBe(sse);
    expect(outcome).toMatchObject({ disconnected: false, error: undefined });
  });
});
