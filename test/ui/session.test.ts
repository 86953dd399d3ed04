import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import Fastify from 'fastify';
import { UI_CSP, uiPages } from '../../src/ui/plugin.js';
import { createTestApp, createUserWithKey, createWorkerKey, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';

const UI = { 'x-trainyard-ui': '1' };

async function signIn(app: App, key: string, headers: Record<string, string> = UI) {
  return app.inject({ method: 'POST', url: '/ui/api/session', headers, payload: { api_key: key } });
}

/**
 * Sends a request head declaring `declared` bytes of JSON body and only `sent` of them, then waits for an
 * answer without sending more. Resolves with the answer once its body has arrived, or with whatever came
 * when `giveUpMs` passed (an answer that needs the whole body never comes).
 */
function answerBeforeBody(
  baseUrl: string,
  request: { method: string; headers: Record<string, string>; declared: number; sent: string; giveUpMs?: number },
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port: Number(new URL(baseUrl).port) });
    let received = '';
    const finish = () => {
      clearTimeout(giveUp);
      socket.destroy();
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0);
      const text = received.slice(received.indexOf('\r\n\r\n') + 4);
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // left as text
      }
      resolve({ status, body });
    };
    const giveUp = setTimeout(finish, request.giveUpMs ?? 10_000);
    socket.on('data', (chunk) => {
      received += chunk.toString('latin1');
      const match = /\r\ncontent-length: (\d+)\r\n[\s\S]*?\r\n\r\n([\s\S]*)$/i.exec(received);
      if (match && Buffer.byteLength(match[2], 'latin1') >= Number(match[1])) finish();
    });
    socket.on('error', finish);
    socket.on('close', finish);
    const head = [
      `${request.method} /ui/api/session HTTP/1.1`,
      'Host: 127.0.0.1',
      'Content-Type: application/json',
      `Content-Length: ${request.declared}`,
      ...Object.entries(request.headers).map(([name, value]) => `${name}: ${value}`),
      '',
      '',
    ].join('\r\n');
    socket.write(head + request.sent);
  });
}

function sessionCookie(setCookie: string | string[] | undefined): string {
  const line = Array.isArray(setCookie) ? setCookie[0] : setCookie;
  return /^ty_session=([^;]*)/.exec(line ?? '')![1];
}

describe('web UI sessions', () => {
  let app: App;
  let user: TestUser;
  beforeAll(async () => {
    app = await createTestApp();
    user = await createUserWithKey(app);
  });
  afterAll(() => app.close());

  it('a user key signs in to an HttpOnly, SameSite=Strict cookie that authenticates API calls', async () => {
    const response = await signIn(app, user.key);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ username: user.username, entity: user.entity, entities: [user.entity], is_admin: false });
    const setCookie = String(response.headers['set-cookie']);
    expect(setCookie).toMatch(/^ty_session=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=604800$/);
    const cookie = `ty_session=${sessionCookie(response.headers['set-cookie'])}`;
    const me = await app.inject({ url: '/ui/api/session', headers: { cookie } });
    expect(me.json().username).toBe(user.username);
    const models = await app.inject({ url: '/v1/preview/models', headers: { cookie } });
    expect(models.statusCode).toBe(200);
  });

  it('with UI_COOKIE_SECURE (TLS ended at a proxy) the cookie is __Host-ty_session and Secure, and sign-out clears both names', async () => {
    const secureApp = await createTestApp({ UI_COOKIE_SECURE: 'true' });
    try {
      const owner = await createUserWithKey(secureApp);
      const response = await signIn(secureApp, owner.key);
      const setCookie = String(response.headers['set-cookie']);
      expect(setCookie).toMatch(/^__Host-ty_session=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=604800; Secure$/);
      const token = /^__Host-ty_session=([^;]*)/.exec(setCookie)![1];
      const cookie = `__Host-ty_session=${token}`;
      expect((await secureApp.inject({ url: '/ui/api/session', headers: { cookie } })).json().username).toBe(owner.username);
      // A bare cookie planted beside it (by a sibling subdomain) does not win over the __Host- one.
      const planted = await secureApp.inject({ url: '/ui/api/session', headers: { cookie: `ty_session=planted; ${cookie}` } });
      expect(planted.json().username).toBe(owner.username);
      const out = await secureApp.inject({ method: 'DELETE', url: '/ui/api/session', headers: { cookie, ...UI } });
      expect(out.statusCode).toBe(204);
      expect(out.headers['set-cookie']).toEqual([
        'ty_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0',
        '__Host-ty_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure',
      ]);
      expect((await secureApp.inject({ url: '/ui/api/session', headers: { cookie } })).statusCode).toBe(401);
    } finally {
      await secureApp.close();
    }
  });

  it('API and /docs answers may be neither sniffed nor framed', async () => {
    for (const url of ['/v1/preview/models', '/docs', '/v1/health', '/traces/server_info']) {
      const response = await app.inject({ url, headers: user.headers });
      expect(response.headers['x-content-type-options'], url).toBe('nosniff');
      expect(response.headers['content-security-policy'], url).toBe("frame-ancestors 'none'");
      expect(response.headers['x-frame-options'], url).toBe('DENY');
    }
  });

  it('stores only a hash of the session token', async () => {
    const token = sessionCookie((await signIn(app, user.key)).headers['set-cookie']);
    const rows = await app.db.selectFrom('ui_sessions').select('token_hash').execute();
    expect(rows.some((r) => r.token_hash === token)).toBe(false);
    expect(rows.length).toBeGreaterThan(0);
  });

  it('a wrong key is refused with 401 and sets no cookie', async () => {
    const response = await signIn(app, 'ty_wrong');
    expect(response.statusCode).toBe(401);
    expect(response.json()).toEqual({ detail: 'Invalid or revoked API key.' });
    expect(response.headers['set-cookie']).toBeUndefined();
  });

  it('a worker key cannot sign in', async () => {
    const worker = await createWorkerKey(app, user.username);
    const response = await signIn(app, worker.key);
    expect(response.statusCode).toBe(403);
    expect(response.json()).toEqual({ detail: 'Worker keys cannot sign in to the web UI: use a user key.' });
  });

  it('signing in needs the UI header and a same-origin Origin (no login CSRF)', async () => {
    const noHeader = await signIn(app, user.key, {});
    expect(noHeader.statusCode).toBe(403);
    expect(noHeader.json()).toEqual({ detail: 'Cookie-authenticated writes need the header "x-trainyard-ui: 1" (sent by the web UI).' });
    const foreign = await signIn(app, user.key, { ...UI, origin: 'https://evil.example' });
    expect(foreign.statusCode).toBe(403);
    expect(foreign.json()).toEqual({ detail: 'Cross-origin request refused: Origin "https://evil.example" is not this server.' });
  });

  it('a sign-in body over 4 KiB is refused with 413 before it is parsed', async () => {
    const response = await signIn(app, `ty_${'x'.repeat(5000)}`);
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({ detail: 'Request body is larger than the limit of 4096 bytes.' });
    expect(response.headers['set-cookie']).toBeUndefined();
    // Sign-out takes no body: one sent anyway is held to the same limit.
    const out = await app.inject({ method: 'DELETE', url: '/ui/api/session', headers: UI, payload: { pad: 'x'.repeat(5000) } });
    expect(out.statusCode).toBe(413);
    expect(out.json()).toEqual({ detail: 'Request body is larger than the limit of 4096 bytes.' });
  });

  it('a sign-in or sign-out without the UI header is refused before its body is read, and the server still answers', async () => {
    const baseUrl = await listen(app);
    // 32 MiB declared (under BODY_LIMIT_MB), a few bytes sent: only a refusal that does not wait for the body arrives.
    for (const method of ['POST', 'DELETE']) {
      const refused = await answerBeforeBody(baseUrl, { method, headers: {}, declared: 32 * 1024 * 1024, sent: '{"api_key": "' });
      expect(refused).toEqual({
        status: 403,
        body: { detail: 'Cookie-authenticated writes need the header "x-trainyard-ui: 1" (sent by the web UI).' },
      });
    }
    const foreign = await answerBeforeBody(baseUrl, {
      method: 'POST',
      headers: { ...UI, origin: 'https://evil.example' },
      declared: 32 * 1024 * 1024,
      sent: '{"api_key": "',
    });
    expect(foreign).toEqual({ status: 403, body: { detail: 'Cross-origin request refused: Origin "https://evil.example" is not this server.' } });
    const after = await fetch(`${baseUrl}/ui/api/session`, {
      method: 'POST',
      headers: { ...UI, 'content-type': 'application/json' },
      body: JSON.stringify({ api_key: user.key }),
    });
    expect(after.status).toBe(200);
  });

  it('cookie-authenticated writes without the UI header or from another origin get 403 and change nothing', async () => {
    const cookie = `ty_session=${sessionCookie((await signIn(app, user.key)).headers['set-cookie'])}`;
    const body = { entity: user.entity, project: 'p', name: 'csrf-model', base_model: 'base' };
    const bare = await app.inject({ method: 'POST', url: '/v1/preview/models', headers: { cookie }, payload: body });
    expect(bare.statusCode).toBe(403);
    expect(bare.json()).toEqual({ detail: 'Cookie-authenticated writes need the header "x-trainyard-ui: 1" (sent by the web UI).' });
    const foreign = await app.inject({
      method: 'POST',
      url: '/v1/preview/models',
      headers: { cookie, ...UI, origin: 'http://evil.example' },
      payload: body,
    });
    expect(foreign.statusCode).toBe(403);
    const opaque = await app.inject({ method: 'POST', url: '/v1/preview/models', headers: { cookie, ...UI, origin: 'null' }, payload: body });
    expect(opaque.statusCode).toBe(403);
    const list = await app.inject({ url: '/v1/preview/models', headers: { cookie } });
    expect(list.json().data).toEqual([]);
    const allowed = await app.inject({
      method: 'POST',
      url: '/v1/preview/models',
      // Same host over https: TLS ended at a proxy in front of this process.
      headers: { cookie, ...UI, origin: 'https://localhost:80' },
      payload: body,
    });
    expect(allowed.statusCode).toBe(200);
  });

  it('bearer keys keep working without the UI header', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/preview/models',
      headers: user.headers,
      payload: { entity: user.entity, project: 'p', name: 'bearer-model', base_model: 'base' },
    });
    expect(response.statusCode).toBe(200);
  });

  it('signing out ends the session', async () => {
    const cookie = `ty_session=${sessionCookie((await signIn(app, user.key)).headers['set-cookie'])}`;
    const out = await app.inject({ method: 'DELETE', url: '/ui/api/session', headers: { cookie, ...UI } });
    expect(out.statusCode).toBe(204);
    expect(String(out.headers['set-cookie'])).toBe('ty_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0');
    const after = await app.inject({ url: '/v1/preview/models', headers: { cookie } });
    expect(after.statusCode).toBe(401);
    expect(after.json()).toEqual({ detail: 'Your session has ended (signed out, expired or its API key was revoked): sign in again.' });
  });

  it('signing out with a session that has already ended still clears the cookie', async () => {
    const cookie = `ty_session=${sessionCookie((await signIn(app, user.key)).headers['set-cookie'])}`;
    expect((await app.inject({ method: 'DELETE', url: '/ui/api/session', headers: { cookie, ...UI } })).statusCode).toBe(204);
    const again = await app.inject({ method: 'DELETE', url: '/ui/api/session', headers: { cookie, ...UI } });
    expect(again.statusCode).toBe(204);
    expect(String(again.headers['set-cookie'])).toBe('ty_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0');
  });

  it('signing out by cookie without the UI header is refused, and the session lives on', async () => {
    const cookie = `ty_session=${sessionCookie((await signIn(app, user.key)).headers['set-cookie'])}`;
    const out = await app.inject({ method: 'DELETE', url: '/ui/api/session', headers: { cookie } });
    expect(out.statusCode).toBe(403);
    expect(out.headers['set-cookie']).toBeUndefined();
    expect((await app.inject({ url: '/ui/api/session', headers: { cookie } })).statusCode).toBe(200);
  });

  it('revoking the key ends its sessions', async () => {
    const other = await createUserWithKey(app);
    const cookie = `ty_session=${sessionCookie((await signIn(app, other.key)).headers['set-cookie'])}`;
    expect((await app.inject({ url: '/ui/api/session', headers: { cookie } })).statusCode).toBe(200);
    await app.auth.revokeKey({ keyId: other.keyId });
    const after = await app.inject({ url: '/ui/api/session', headers: { cookie } });
    expect(after.statusCode).toBe(401);
  });

  it('the session cookie is never accepted on the worker protocol', async () => {
    const cookie = `ty_session=${sessionCookie((await signIn(app, user.key)).headers['set-cookie'])}`;
    const response = await app.inject({ method: 'POST', url: '/v1/workers/claim', headers: { cookie, ...UI }, payload: {} });
    expect(response.statusCode).toBe(401);
  });
});

describe('serving the web UI pages', () => {
  async function pages(files: Record<string, string>) {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-ui-'));
    for (const [name, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
      fs.writeFileSync(path.join(root, name), text);
    }
    const app = Fastify();
    await app.register(uiPages, { prefix: '/ui', root });
    return app;
  }

  it('answers every page with how to build the UI when it is not built', async () => {
    const app = await pages({});
    for (const url of ['/ui/', '/ui/models/x']) {
      const response = await app.inject({ url });
      expect(response.statusCode).toBe(503);
      expect(response.body).toBe('The web UI is not built. Run "npm run build" (it bundles ui/ into dist/ui/), then restart the server.\n');
    }
    await app.close();
  });

  it('serves index.html for deep links with the CSP, and hashed assets as immutable', async () => {
    const app = await pages({ 'index.html': '<!doctype html><title>t</title>', 'assets/main-ABC123.js': 'void 0' });
    const index = await app.inject({ url: '/ui/models/abc?x=1' });
    expect(index.statusCode).toBe(200);
    expect(index.body).toContain('<title>t</title>');
    expect(index.headers['content-security-policy']).toBe(UI_CSP);
    expect(index.headers['x-content-type-options']).toBe('nosniff');
    expect(index.headers['cache-control']).toBe('no-cache');
    const root = await app.inject({ url: '/ui/' });
    expect(root.headers['cache-control']).toBe('no-cache');
    const asset = await app.inject({ url: '/ui/assets/main-ABC123.js' });
    expect(asset.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect((await app.inject({ url: '/ui/assets/missing.js' })).statusCode).toBe(404);
    expect((await app.inject({ url: '/ui/api/nope' })).statusCode).toBe(404);
    await app.close();
  });
});

it('the CSP allows nothing inline and nothing from another host', () => {
  expect(UI_CSP).toBe(
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
  );
});
