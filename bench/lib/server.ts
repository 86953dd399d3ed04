import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { request } from 'undici';
import { buildApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { createPgPool, openDatabase, postgresHandle } from '../../src/db/index.js';

export interface BenchServer {
  app: App;
  /** http://127.0.0.1:PORT */
  url: string;
  /** A user key of the user `bench`. */
  key: string;
  /** Whether DATABASE_URL's server is behind the app (else PGlite). */
  onServer: boolean;
  close(): Promise<void>;
}

/**
 * The whole app on loopback for a benchmark: on a scratch database beside DATABASE_URL's (created
 * here, dropped on close) when that is set, else on PGlite in a temporary directory. `env` adds
 * configuration (README's table).
 */
export async function startBenchServer(name: string, env: Record<string, string> = {}): Promise<BenchServer> {
  const serverUrl = process.env.DATABASE_URL;
  const scratch = `trainyard_bench_${name}_${process.pid}`;
  let databaseUrl: string | undefined;
  if (serverUrl) {
    const admin = new pg.Pool({ connectionString: serverUrl, max: 1 });
    await admin.query(`create database ${scratch}`);
    await admin.end();
    const url = new URL(serverUrl);
    url.pathname = `/${scratch}`;
    databaseUrl = url.toString();
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-bench-'));
  const config = loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', BOOTSTRAP_ADMIN: 'false', ...env, ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}) });
  const database = databaseUrl ? postgresHandle(createPgPool(databaseUrl, 10)) : await openDatabase(config);
  const app = await buildApp(config, { database });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  await app.auth.createUser({ username: 'bench' });
  const { key } = await app.auth.createKey({ username: 'bench' });
  return {
    app,
    url,
    key,
    onServer: databaseUrl !== undefined,
    async close() {
      await app.close();
      if (serverUrl) {
        const admin = new pg.Pool({ connectionString: serverUrl, max: 1 });
        await admin.query(`drop database if exists ${scratch} with (force)`);
        await admin.end();
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * POSTs to the tracing API (`/traces` + `url`) as the bench user, `body` as JSON (a string as it is).
 * Resolves with the response's text; any status but 200 throws, naming the route.
 */
export function tracingPoster(server: BenchServer): (url: string, body: unknown) => Promise<string> {
  const headers = { authorization: `Basic ${Buffer.from(`api:${server.key}`).toString('base64')}`, 'content-type': 'application/json' };
  return async (url, body) => {
    const response = await request(`${server.url}/traces${url}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
    const text = await response.body.text();
    if (response.statusCode !== 200) throw new Error(`${url}: ${response.statusCode} ${text.slice(0, 300)}`);
    return text;
  };
}
