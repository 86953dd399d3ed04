import fs from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { openPage, screenshot, signIn, startUi, type UiServer } from './harness.js';

/** Sign-in, sign-out, revocation, cookie flags, CSRF and the next= redirect, in a real Chromium. */

const EXPECTED_401 = /Failed to load resource: the server responded with a status of 401/;

let server: UiServer;
let user: TestUser;
beforeAll(async () => {
  server = await startUi();
  user = await createUserWithKey(server.app);
});
afterAll(() => server?.close());

describe('sign-in', () => {
  it('sends a signed-out visitor to the sign-in page, then back to the page asked for', async () => {
    const w = await openPage(server);
    await w.page.goto(`${server.url}/ui/admin?x=1`);
    await w.page.getByRole('heading', { name: 'Sign in to trainyard' }).waitFor();
    expect(new URL(w.page.url()).searchParams.get('next')).toBe('/admin?x=1');
    await screenshot(w.page, 'sign-in');
    await w.page.getByLabel('API key').fill(user.key);
    await w.page.getByRole('button', { name: 'Sign in' }).click();
    await w.page.getByRole('heading', { name: 'Admin' }).waitFor();
    expect(w.page.url()).toBe(`${server.url}/ui/admin?x=1`);
    await w.page.getByText('This page needs an admin key.').waitFor();
    w.expectClean([EXPECTED_401]);
    await w.context.close();
  });

  it('keeps a wrong key on the sign-in page with the server\'s message', async () => {
    const w = await openPage(server);
    await w.page.goto(`${server.url}/ui/login`);
    await w.page.getByLabel('API key').fill('ty_not_a_key');
    await w.page.getByRole('button', { name: 'Sign in' }).click();
    await w.page.getByRole('alert').getByText('Invalid or revoked API key.').waitFor();
    expect(new URL(w.page.url()).pathname).toBe('/ui/login');
    expect(await w.context.cookies()).toEqual([]);
    w.expectClean([EXPECTED_401]);
    await w.context.close();
  });

  it('sets an HttpOnly, SameSite=Strict session cookie that page scripts cannot read', async () => {
    const w = await openPage(server);
    await signIn(w.page, server.url, user.key);
    const cookies = await w.context.cookies();
    expect(cookies.map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, path: c.path }))).toEqual([
      { name: 'ty_session', httpOnly: true, sameSite: 'Strict', path: '/' },
    ]);
    expect(await w.page.evaluate('document.cookie')).toBe('');
    expect(await w.page.evaluate('JSON.stringify({ ...sessionStorage, ...localStorage })')).not.toContain(user.key);
    w.expectClean([EXPECTED_401]);
    await w.context.close();
  });

  it('refuses to redirect off this app after sign-in (no open redirect)', async () => {
    for (const next of ['https://evil.example/', '//evil.example/x', '/\\evil.example', 'javascript:alert(1)']) {
      const w = await openPage(server);
      await signIn(w.page, server.url, user.key, next);
      await w.page.getByRole('heading', { name: 'Projects' }).waitFor();
      expect(w.page.url()).toBe(`${server.url}/ui/`);
      w.expectClean([EXPECTED_401]);
      await w.context.close();
    }
  });

  it('signing out returns to sign-in, and the old cookie no longer works', async () => {
    const w = await openPage(server);
    await signIn(w.page, server.url, user.key);
    const [cookie] = await w.context.cookies();
    await w.page.getByRole('button', { name: 'Sign out' }).click();
    await w.page.getByRole('heading', { name: 'Sign in to trainyard' }).waitFor();
    const reuse = await fetch(`${server.url}/v1/preview/models`, { headers: { cookie: `ty_session=${cookie.value}` } });
    expect(reuse.status).toBe(401);
    w.expectClean([EXPECTED_401]);
    await w.context.close();
  });

  it('revoking the key sends the browser back to sign-in on its next navigation', async () => {
    const revocable = await createUserWithKey(server.app);
    const w = await openPage(server);
    await signIn(w.page, server.url, revocable.key);
    await server.app.auth.revokeKey({ keyId: revocable.keyId });
    await w.page.reload();
    await w.page.getByRole('heading', { name: 'Sign in to trainyard' }).waitFor();
    w.expectClean([EXPECTED_401]);
    await w.context.close();
  });

  it('a cross-site style write with the cookie but without the UI header is refused with 403', async () => {
    const w = await openPage(server);
    await signIn(w.page, server.url, user.key);
    const status = await w.page.evaluate(async () => {
      const response = await fetch('/v1/preview/models', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ project: 'p', name: 'm', base_model: 'b' }),
      });
      return { status: response.status, body: await response.json() };
    });
    expect(status).toEqual({
      status: 403,
      body: { detail: 'Cookie-authenticated writes need the header "x-trainyard-ui: 1" (sent by the web UI).' },
    });
    w.expectClean([EXPECTED_401, /status of 403/]);
    await w.context.close();
  });

  it('shows a not-found view for unknown pages, and the API keeps its JSON 404', async () => {
    const w = await openPage(server);
    await signIn(w.page, server.url, user.key);
    await w.page.goto(`${server.url}/ui/no/such/page`);
    await w.page.getByRole('heading', { name: 'Not found' }).waitFor();
    const api = await fetch(`${server.url}/v1/nope`);
    expect(api.status).toBe(404);
    expect(api.headers.get('content-type')).toContain('application/json');
    w.expectClean([EXPECTED_401]);
    await w.context.close();
  });
});

describe('the built UI', () => {
  const assets = path.resolve('dist/ui/assets');
  const files = () => fs.readdirSync(assets).map((name) => path.join(assets, name));

  it('keeps the entry script within 60 KB gzipped', () => {
    const html = fs.readFileSync(path.resolve('dist/ui/index.html'), 'utf8');
    const entry = /src="\/ui\/assets\/([^"]+\.js)"/.exec(html)![1];
    const gzipped = gzipSync(fs.readFileSync(path.join(assets, entry))).length;
    console.log(`entry script ${entry}: ${(gzipped / 1024).toFixed(1)} KB gzipped`);
    expect(gzipped).toBeLessThanOrEqual(60 * 1024);
  });

  it('names no other host (only the XML namespaces the DOM library compares against)', () => {
    const namespaces = new Set(['http://www.w3.org/1998/Math/MathML', 'http://www.w3.org/1999/xhtml', 'http://www.w3.org/2000/svg']);
    for (const file of files()) {
      const urls = fs.readFileSync(file, 'utf8').match(/https?:\/\/[^\s"'`)]+/g) ?? [];
      expect(urls.filter((url) => !namespaces.has(url)), file).toEqual([]);
    }
  });

  it('answers pages with the CSP and no-cache, hashed assets as immutable', async () => {
    const page = await fetch(`${server.url}/ui/models/x`);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(page.headers.get('cache-control')).toBe('no-cache');
    const asset = await fetch(`${server.url}/ui/assets/${path.basename(files()[0])}`);
    expect(asset.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
  });
});
