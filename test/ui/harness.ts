import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { createTestApp, testConfig } from '../helpers/app.js';
import { embeddedDatabaseIn } from '../helpers/database.js';
import { listen } from '../helpers/listen.js';

/** The browser suite's harness: the app on a loopback port, Debian's Chromium, and a watch on every page. */

// The one place the suite reads the environment, to point at another Chromium.
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
export const SCREENSHOTS = path.resolve('docs/ui');

export interface UiServer {
  app: App;
  url: string;
  browser: Browser;
  close(): Promise<void>;
}

export async function startUi(env: Record<string, string> = {}, options: { dataDir?: string } = {}): Promise<UiServer> {
  // In a data directory, the embedded database is kept in files as a server keeps it (backups need them).
  const app = options.dataDir === undefined ? await createTestApp(env) : await appInDataDir(options.dataDir, env);
  const url = await listen(app);
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: ARGS });
  return {
    app,
    url,
    browser,
    async close() {
      await browser.close();
      await app.close();
    },
  };
}

async function appInDataDir(dataDir: string, env: Record<string, string>): Promise<App> {
  const app = await buildApp(testConfig({ DATA_DIR: dataDir, ...env }), { database: await embeddedDatabaseIn(dataDir) });
  await app.ready();
  return app;
}

export interface WatchedPage {
  page: Page;
  context: BrowserContext;
  /** Page errors, console errors, CSP violations and requests to any other origin, as they happened. */
  problems: string[];
  /** Asserts that nothing went wrong, except console lines matching `allow` (an expected 401, say). */
  expectClean(allow?: RegExp[]): void;
}

/**
 * A fresh browser context and page that records every page error, console error, CSP violation (the
 * page reports them to the console through an init script) and off-origin request.
 */
export async function openPage(server: UiServer): Promise<WatchedPage> {
  const context = await server.browser.newContext({ viewport: { width: 1200, height: 760 }, reducedMotion: 'reduce' });
  // A string, not a function: this file is type-checked without the DOM library.
  await context.addInitScript(
    "document.addEventListener('securitypolicyviolation', (e) => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));",
  );
  const page = await context.newPage();
  const origin = new URL(server.url).origin;
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
  });
  page.on('request', (request) => {
    const url = request.url();
    if (!url.startsWith('data:') && !url.startsWith('blob:') && new URL(url).origin !== origin) problems.push(`off-origin request: ${url}`);
  });
  return {
    page,
    context,
    problems,
    expectClean(allow = []) {
      expect(problems.filter((p) => !allow.some((re) => re.test(p)))).toEqual([]);
    },
  };
}

/** Signs in through the login form. */
export async function signIn(page: Page, url: string, key: string, next?: string): Promise<void> {
  await page.goto(`${url}/ui/login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

/** A session cookie for `key`, set on the context without going through the form (screens other than sign-in). */
export async function signInContext(context: BrowserContext, url: string, key: string): Promise<void> {
  const response = await fetch(`${url}/ui/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-trainyard-ui': '1' },
    body: JSON.stringify({ api_key: key }),
  });
  if (!response.ok) throw new Error(`sign-in answered ${response.status}: ${await response.text()}`);
  const token = /ty_session=([^;]+)/.exec(response.headers.get('set-cookie') ?? '')![1];
  await context.addCookies([{ name: 'ty_session', value: token, url, httpOnly: true, sameSite: 'Strict' }]);
}

/** A screenshot for docs/ui.md, taken on seeded data. */
export async function screenshot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`) });
}
