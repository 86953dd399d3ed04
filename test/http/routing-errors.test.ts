import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { uiPages } from '../../src/ui/plugin.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';

/**
 * The answers given before any route runs: a path the router cannot read, a request Node cannot parse, a
 * method the path does not serve, a path no route matches. Each in its API's error form (training
 * `{"detail"}`, inference OpenAI's `{"error"}`, tracing `{"reason"}`). Paths go over a real socket as
 * written: app.inject would normalise some of them first.
 */

let app: App;
let baseUrl: string;
let user: TestUser;

beforeAll(async () => {
  app = await createTestApp();
  baseUrl = await listen(app);
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** One request with the path exactly as given. */
function request(method: string, target: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const sent = http.request(`${baseUrl}/`, { method, path: target, headers, agent: false }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, text }));
    });
    sent.on('error', reject);
    sent.end();
  });
}

/** Writes `bytes` on a fresh connection and reads until the server closes it. */
function rawExchange(bytes: string): Promise<{ received: string; closedByServer: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port: Number(new URL(baseUrl).port) });
    const result = { received: '', closedByServer: false };
    const giveUp = setTimeout(() => socket.destroy(), 10_000);
    socket.on('data', (chunk) => (result.received += chunk.toString('latin1')));
    socket.on('end', () => (result.closedByServer = true));
    socket.on('error', () => (result.closedByServer = true));
    socket.on('close', () => {
      clearTimeout(giveUp);
      resolve(result);
    });
    socket.write(bytes);
  });
}

const openAi = (message: string, code: string) => ({ error: { message, type: 'invalid_request_error', param: null, code } });

describe('a path the router cannot read', () => {
  const percent = (target: string) =>
    `Malformed percent-encoding in the path ${target}: each % must start an escape (%XX) of valid UTF-8.`;

  it('is a 400 in the inference form, with x-request-id', async () => {
    const answer = await request('GET', '/v1/models/%ff', { 'x-request-id': 'bad-url-1' });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text)).toEqual(openAi(percent('/v1/models/%ff'), 'invalid_url'));
    expect(answer.headers['x-request-id']).toBe('bad-url-1');
    expect(answer.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(answer.headers['x-content-type-options']).toBe('nosniff');
    expect(answer.headers['content-security-policy']).toBe("frame-ancestors 'none'");
    expect(answer.headers['x-frame-options']).toBe('DENY');
  });

  it('is a 400 in the training form for an overlong UTF-8 sequence', async () => {
    const answer = await request('GET', '/v1/preview/models/%C0%AF');
    expect([answer.status, JSON.parse(answer.text)]).toEqual([400, { detail: percent('/v1/preview/models/%C0%AF') }]);
    expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('is a 400 in the tracing form, with or without a key', async () => {
    for (const headers of [{}, user.headers]) {
      const answer = await request('GET', '/traces/objs/%ff/aliases', headers);
      expect([answer.status, JSON.parse(answer.text)]).toEqual([400, { reason: percent('/traces/objs/%ff/aliases') }]);
    }
  });

  it('echoes at most 256 characters of the path', async () => {
    const target = `/v1/preview/models/%ff${'a'.repeat(1000)}`;
    const answer = await request('POST', target);
    expect([answer.status, JSON.parse(answer.text)]).toEqual([400, { detail: percent(`${target.slice(0, 256)}…`) }]);
  });

  it('is a 414 in the API\'s form for a path parameter over 4,096 characters', async () => {
    const training = await request('GET', `/v1/preview/models/${'a'.repeat(5000)}`, { 'x-request-id': 'long-1' });
    expect([training.status, JSON.parse(training.text)]).toEqual([414, { detail: 'A path parameter is longer than the limit of 4096 characters.' }]);
    expect(training.headers['x-request-id']).toBe('long-1');
    const tracing = await request('PUT', `/traces/objs/${'a'.repeat(5000)}/aliases`);
    expect([tracing.status, JSON.parse(tracing.text)]).toEqual([414, { reason: 'A path parameter is longer than the limit of 4096 characters.' }]);
  });
});

describe('a request Node cannot parse', () => {
  const refused = (reason: string) => {
    const body = JSON.stringify({ detail: `Malformed HTTP request: ${reason}.` });
    return `HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`;
  };

  it('a header line without a colon is a 400 {"detail"} and the connection closes', async () => {
    const exchange = await rawExchange('GET /v1/health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n');
    expect(exchange).toEqual({ received: refused('Invalid header token'), closedByServer: true });
  });

  it('two Content-Length headers are a 400 {"detail"} and the connection closes', async () => {
    const exchange = await rawExchange('POST /v1/preview/models HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab');
    expect(exchange).toEqual({ received: refused('Duplicate Content-Length'), closedByServer: true });
  });

  it('a header block over Node\'s limit is a 431 {"detail"}', async () => {
    const exchange = await rawExchange(`GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    const body = JSON.stringify({ detail: 'The request\'s header fields are larger than the server accepts.' });
    expect(exchange).toEqual({
      received: `HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      closedByServer: true,
    });
  });
});

describe('a method the path does not serve', () => {
  it('is a 405 with Allow in the inference form', async () => {
    const answer = await request('GET', '/v1/chat/completions', user.headers);
    expect(answer.status).toBe(405);
    expect(answer.headers.allow).toBe('POST');
    expect(JSON.parse(answer.text)).toEqual(
      openAi('Method GET is not allowed on /v1/chat/completions; it allows POST.', 'method_not_allowed'),
    );
    expect(answer.headers['x-request-id']).toBeDefined();
  });

  it('is a 405 with Allow in the training form', async () => {
    const answer = await request('PUT', '/v1/health');
    expect([answer.status, answer.headers.allow, JSON.parse(answer.text)]).toEqual([
      405,
      'GET, HEAD',
      { detail: 'Method PUT is not allowed on /v1/health; it allows GET, HEAD.' },
    ]);
  });

  it('is a 405 with Allow in the tracing form, /graphql included', async () => {
    const call = await request('GET', '/traces/call/start?x=1', user.headers);
    expect([call.status, call.headers.allow, JSON.parse(call.text)]).toEqual([
      405,
      'POST',
      { reason: 'Method GET is not allowed on /traces/call/start; it allows POST.' },
    ]);
    const graphql = await request('GET', '/graphql');
    expect([graphql.status, graphql.headers.allow, JSON.parse(graphql.text)]).toEqual([
      405,
      'POST',
      { reason: 'Method GET is not allowed on /graphql; it allows POST.' },
    ]);
  });

  it('is a 405, not a 401, without a key or with a wrong one', async () => {
    for (const headers of [{}, { authorization: 'Bearer ty_wrong' }] as Record<string, string>[]) {
      for (const [method, target, allow] of [
        ['GET', '/v1/chat/completions', 'POST'],
        ['DELETE', '/v1/preview/models', 'GET, HEAD, POST'],
        ['GET', '/traces/objs/some-object/aliases', 'PUT'],
      ]) {
        const answer = await request(method, target, headers);
        expect([target, answer.status, answer.headers.allow]).toEqual([target, 405, allow]);
      }
    }
  });

  it('lists every method of a wildcard route\'s paths', async () => {
    const model = await request('DELETE', '/v1/models/some/model:step1', user.headers);
    expect([model.status, model.headers.allow, JSON.parse(model.text)]).toEqual([
      405,
      'GET, HEAD',
      openAi('Method DELETE is not allowed on /v1/models/some/model:step1; it allows GET, HEAD.', 'method_not_allowed'),
    ]);
    const session = await request('PUT', '/ui/api/session');
    expect([session.status, session.headers.allow]).toEqual([405, 'GET, HEAD, DELETE, POST']);
  });

  it('OPTIONS is a 405 with Allow, and no CORS header', async () => {
    const answer = await request('OPTIONS', '/v1/health', { origin: 'https://elsewhere.example', 'access-control-request-method': 'GET' });
    expect([answer.status, answer.headers.allow]).toEqual([405, 'GET, HEAD']);
    expect(Object.keys(answer.headers).filter((name) => name.startsWith('access-control-'))).toEqual([]);
  });

  it('HEAD on a route that only takes POST is a 405 without a body', async () => {
    const answer = await request('HEAD', '/v1/chat/completions');
    expect([answer.status, answer.headers.allow, answer.text]).toEqual([405, 'POST', '']);
  });

  it('a path no route serves for any method stays a 404', async () => {
    for (const [target, body] of [
      ['/v1/nothing-here', openAi('No route for PUT /v1/nothing-here.', 'not_found')],
      ['/v1/health/extra', { detail: 'No route for PUT /v1/health/extra.' }],
      ['/traces/nothing', { reason: 'No route for PUT /traces/nothing.' }],
    ] as const) {
      const answer = await request('PUT', target);
      expect([answer.status, answer.headers.allow, JSON.parse(answer.text)]).toEqual([404, undefined, body]);
    }
  });
});

describe('the form of a path no route matches', () => {
  it('/graphql/ answers in the tracing form', async () => {
    const answer = await request('POST', '/graphql/');
    expect([answer.status, JSON.parse(answer.text)]).toEqual([404, { reason: 'No route for POST /graphql/.' }]);
  });

  it('paths that read as /v1/health answer in its (training) form', async () => {
    for (const target of ['/v1/health/', '/v1//health', '/v1/health;x=1', '/v1/./health/x']) {
      const answer = await request('GET', target);
      expect([target, answer.status, JSON.parse(answer.text)]).toEqual([target, 404, { detail: `No route for GET ${target}.` }]);
    }
  });

  it('paths that read as an OpenAI route keep the inference form', async () => {
    const answer = await request('GET', '/v1//embeddings');
    expect([answer.status, JSON.parse(answer.text)]).toEqual([404, openAi('No route for GET /v1//embeddings.', 'not_found')]);
  });
});

describe('an invalid JSON body on the inference API', () => {
  it('names no param: its loc is a character offset, not a field', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { ...user.headers, 'content-type': 'application/json' },
      payload: '{"mod',
    });
    expect(response.statusCode).toBe(422);
    const body = response.json();
    expect(body.detail[0]).toMatchObject({ type: 'json_invalid', loc: ['body', 5] });
    expect(body.error).toMatchObject({ param: null, code: 'json_invalid', type: 'invalid_request_error' });
  });
});

describe('web UI deep links', () => {
  let ui: Awaited<ReturnType<typeof pages>>;
  async function pages() {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-ui-'));
    fs.writeFileSync(path.join(root, 'index.html'), '<!doctype html><title>t</title>');
    const pagesApp = Fastify();
    await pagesApp.register(uiPages, { prefix: '/ui', root });
    return pagesApp;
  }
  beforeAll(async () => {
    ui = await pages();
  });
  afterAll(async () => {
    await ui.close();
  });

  it('HEAD answers as GET, without a body', async () => {
    const get = await ui.inject({ method: 'GET', url: '/ui/models/abc' });
    const head = await ui.inject({ method: 'HEAD', url: '/ui/models/abc' });
    expect([get.statusCode, head.statusCode, head.body]).toEqual([200, 200, '']);
    expect(head.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(head.headers['content-length']).toBe(get.headers['content-length']);
    expect(head.headers['cache-control']).toBe('no-cache');
  });

  it('other methods are a 405 with Allow: GET, HEAD', async () => {
    const post = await ui.inject({ method: 'POST', url: '/ui/models/abc' });
    expect([post.statusCode, post.headers.allow, post.json()]).toEqual([
      405,
      'GET, HEAD',
      { detail: 'Method POST is not allowed on /ui/models/abc; it allows GET, HEAD.' },
    ]);
  });

  it('a missing asset and an unknown /ui/api/ path stay 404s, whatever the method', async () => {
    for (const method of ['GET', 'HEAD', 'POST'] as const) {
      for (const url of ['/ui/assets/missing.js', '/ui/api/nope']) {
        const response = await ui.inject({ method, url });
        expect([method, url, response.statusCode, response.headers.allow]).toEqual([method, url, 404, undefined]);
      }
    }
    expect((await ui.inject({ method: 'GET', url: '/ui/api/nope' })).json()).toEqual({ detail: 'No route for GET /ui/api/nope.' });
  });
});
