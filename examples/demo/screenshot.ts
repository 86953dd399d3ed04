/**
 * Takes the screenshot of a model page for docs/ui/ after a demo run (`npm run demo -- --keep-running`),
 * in Debian's Chromium (CHROMIUM_PATH overrides /usr/bin/chromium):
 *
 *   npx tsx examples/demo/screenshot.ts http://127.0.0.1:8000 ty_<demo key> <model id> docs/ui/demo-model.png
 */
import { chromium } from 'playwright-core';

const [url, key, modelId, out] = process.argv.slice(2);
if (!url || !key || !modelId || !out) {
  console.error('usage: screenshot.ts URL KEY MODEL_ID OUT.png');
  process.exit(2);
}

// The UI's session cookie for the key, set without the sign-in form.
const response = await fetch(`${url}/ui/api/session`, {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'x-trainyard-ui': '1' },
  body: JSON.stringify({ api_key: key }),
});
if (!response.ok) throw new Error(`sign-in answered ${response.status}: ${await response.text()}`);
const token = /ty_session=([^;]+)/.exec(response.headers.get('set-cookie') ?? '')?.[1];
if (!token) throw new Error('sign-in set no session cookie');

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 760 }, reducedMotion: 'reduce' });
  await context.addCookies([{ name: 'ty_session', value: token, url, httpOnly: true, sameSite: 'Strict' }]);
  const page = await context.newPage();
  await page.goto(`${url}/ui/models/${modelId}`);
  // The reward chart draws on a canvas once the metrics have loaded.
  await page.locator('canvas').first().waitFor({ timeout: 30_000 });
  await page.waitForLoadState('networkidle');
  await page.screenshot({ path: out });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
}
