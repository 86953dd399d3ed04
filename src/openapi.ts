import os from 'node:os';
import path from 'node:path';
import { buildApp } from './app.js';
import { loadConfig } from './config.js';
import { createPglite, pgliteHandle } from './db/index.js';

export const OPENAPI_PATH = path.join('openapi', 'openapi.json');

/** The OpenAPI document of every route, as committed in openapi/openapi.json. */
export async function generateOpenApi(): Promise<string> {
  const config = loadConfig({ LOG_LEVEL: 'silent', BOOTSTRAP_ADMIN: 'false', DATA_DIR: path.join(os.tmpdir(), 'trainyard-openapi') });
  const app = await buildApp(config, { database: pgliteHandle(await createPglite()) });
  try {
    await app.ready();
    return `${JSON.stringify(app.swagger(), null, 2)}\n`;
  } finally {
    await app.close();
  }
}
