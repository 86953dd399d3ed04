import fs from 'node:fs';
import path from 'node:path';
import { CHROMIUM_PATH } from './harness.js';

/** Fails the browser suite at once, with what to install, when Chromium or the built UI is missing. */
export default function setup(): void {
  if (!fs.existsSync(CHROMIUM_PATH)) {
    throw new Error(
      `The browser tests need Chromium at ${CHROMIUM_PATH}: install the Debian package "chromium" (apt-get install -y chromium), or set CHROMIUM_PATH.`,
    );
  }
  if (!fs.existsSync(path.resolve('dist/ui/index.html'))) {
    throw new Error('The web UI is not built: run "npm run test:ui" (it builds the UI first) or "npm run build:ui".');
  }
}
