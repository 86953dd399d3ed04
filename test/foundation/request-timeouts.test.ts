import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';

/**
 * REQUEST_TIMEOUT_SECONDS bounds the time a client has to send its request, so a client that stalls
 * mid-body cannot hold the part it sent (up to BODY_LIMIT_MB) for as long as it likes. Only receiving is
 * timed: a response that takes longer than the timeout (a long-polled claim) is still answered.
 */

let app: App;
let baseUrl: string;
let user: TestUser;

beforeAll(async () => {
  app = await createTestApp({ REQUEST_TIMEOUT_SECONDS: '1' });
  baseUrl = await listen(app);
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
});

interface Stalled {
  /** Everything the server sent, as text. */
  received: string;
  /** Whether the server ended the connection (false: this client gave up waiting). */
  closedByServer: boolean;
}

/**
 * Sends a request head declaring `declared` bytes of body, then only `sent` of them, and waits without
 * sending more until the server closes the connection, or `giveUpMs` passes (far beyond the timeout: it
 * only keeps the test from waiting forever when nothing closes the connection).
 */
function stallMidBody(headers: Record<string, string>, options: { declared: number; sent: string; giveUpMs?: number }): Promise<Stalled> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port: Number(new URL(baseUrl).port) });
    const result: Stalled = { received: '', closedByServer: false };
    const giveUp = setTimeout(() => socket.destroy(), options.giveUpMs ?? 20_000);
    socket.on('data', (chunk) => (result.received += chunk.toString('latin1')));
    socket.on('end', () => (result.closedByServer = true));
    socket.on('error', () => (result.closedByServer = true)); // a reset is the server closing too
    socket.on('close', () => {
      clearTimeout(giveUp);
      resolve(result);
    });
    const head = [
      'POST /v1/preview/models HTTP/1.1',
      'Host: 127.0.0.1',
      'Content-Type: application/json',
      `Content-Length: ${options.declared}`,
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
      '',
      '',
    ].join('\r\n');
    socket.write(head + options.sent);
  });
}

describe('REQUEST_TIMEOUT_SECONDS', () => {
  it('answers a client that stalls mid-body with 408 and closes its connection, and serves requests sent in time', async () => {
    const create = (name: string) =>
      fetch(`${baseUrl}/v1/preview/models`, {
        method: 'POST',
        headers: { ...user.headers, 'content-type': 'application/json' },
        body: JSON.stringify({ entity: user.entity, project: 'p', name, base_model: 'base' }),
      });
    expect((await create('before-stall')).status).toBe(200);
    const stalled = await stallMidBody(
      { Authorization: `Bearer ${user.key}` },
      { declared: 1024 * 1024, sent: `{"entity": "${user.entity}", "project": "p", "name": "` },
    );
    expect(stalled.closedByServer).toBe(true);
    expect(stalled.received).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect((await create('after-stall')).status).toBe(200);
  });

  it('times a request that has not finished its head as well', async () => {
    const result = await new Promise<Stalled>((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port: Number(new URL(baseUrl).port) });
      const stalled: Stalled = { received: '', closedByServer: false };
      const giveUp = setTimeout(() => socket.destroy(), 20_000);
      socket.on('data', (chunk) => (stalled.received += chunk.toString('latin1')));
      socket.on('end', () => (stalled.closedByServer = true));
      socket.on('error', () => (stalled.closedByServer = true));
      socket.on('close', () => {
        clearTimeout(giveUp);
        resolve(stalled);
      });
      socket.write('POST /v1/preview/models HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: app');
    });
    expect(result.closedByServer).toBe(true);
    expect(result.received).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
  });

  it('does not time responses: a claim long-polled past the timeout is answered', async () => {
    const worker = await createWorkerKey(app, user.username);
    const claim = await fetch(`${baseUrl}/v1/workers/claim`, {
      method: 'POST',
      headers: { ...worker.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ worker_id: 'w-timeout', base_models: ['none'], wait_seconds: 3 }),
    });
    expect(claim.status).toBe(204);
  });
});
