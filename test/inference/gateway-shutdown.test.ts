import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { request as undiciRequest } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { closeGracefully } from '../../src/server.js';
import { createPglite, createPgPool, pgliteDataPath, pgliteHandle, postgresHandle, type Database } from '../../src/db/index.js';
import { createUserWithKey, testConfig } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';
import { adminPool, databaseUrl } from '../helpers/postgres.js';
import { listen } from '../helpers/listen.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, chat, writeBackendsFile } from './gateway-helpers.js';
import { waitFor } from './helpers.js';

const engines: FakeEngine[] = [];
afterAll(async () => {
  await Promise.all(engines.map((engine) => engine.close()));
});

describe('shutdown', () => {
  it('meters every streamed completion in flight at SIGTERM exactly once, the one cut at the grace period included', async () => {
    // Three streams end within the grace period; the fourth would run for minutes and is cut.
    const quick = await startFakeEngine({ models: ['fake/quick'], chunks: 4, chunkDelayMs: 50 });
    const endless = await startFakeEngine({ models: ['fake/endless'], chunks: 10_000, chunkDelayMs: 50 });
    engines.push(quick, endless);
    // The app opens and closes its own database, as the server does (PGlite in DATA_DIR, or the server
    // database): the usage of the stream cut at the grace period is written before the database closes.
    const target = await ownedDatabase();
    const config = testConfig({
      BACKENDS_FILE: writeBackendsFile([backendEntry('quick', [quick.url], { models: ['fake/quick'] }), backendEntry('endless', [endless.url], { models: ['fake/endless'] })]),
      USAGE_FLUSH_INTERVAL_MS: '60000',
      ...target.env,
    });
    const app = await buildApp(config);
    try {
      const url = await listen(app);
      const user = await createUserWithKey(app);
      const ids = ['shutdown-quick-1', 'shutdown-quick-2', 'shutdown-quick-3', 'shutdown-cut-1'];
      const bodies = ids.map(async (id) => {
        const response = await undiciRequest(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { ...user.headers, 'content-type': 'application/json', 'x-request-id': id },
          body: JSON.stringify(chat(id.startsWith('shutdown-cut') ? 'fake/endless' : 'fake/quick', { stream: true })),
        });
        return response.body.text().catch(() => 'cut');
      });
      await waitFor(() => quick.chatRequests().length === 3 && endless.chatRequests().length === 1);
      await closeGracefully(app, 500);
      await Promise.all(bodies);

      const rows = await target.usageRows(config.dataDir);
      expect(rows).toEqual([
        { request_id: 'shutdown-cut-1', outcome: 'client_disconnected', completion_tokens: expect.any(Number), estimated: true },
        { request_id: 'shutdown-quick-1', outcome: 'success', completion_tokens: 4, estimated: false },
        { request_id: 'shutdown-quick-2', outcome: 'success', completion_tokens: 4, estimated: false },
        { request_id: 'shutdown-quick-3', outcome: 'success', completion_tokens: 4, estimated: false },
      ]);
      expect(rows[0].completion_tokens).toBeGreaterThan(0);
    } finally {
      await app.close();
      await target.drop();
    }
  }, 60_000);
});

/**
 * A database the app opens from config and closes itself: a fresh PGlite data directory, or (with
 * TEST_DATABASE_URL) a fresh server database. `usageRows` reopens it after the app has closed it.
 */
async function ownedDatabase() {
  const select = (db: Kysely<Database>) =>
    db.selectFrom('usage_records').select(['request_id', 'outcome', 'completion_tokens', 'estimated']).orderBy('request_id').execute();
  if (!onPostgresServer) {
    return {
      env: {} as Record<string, string>,
      async usageRows(dataDir: string) {
        const handle = pgliteHandle(await createPglite({ dataDir: pgliteDataPath(dataDir) }));
        try {
          return await select(handle.db);
        } finally {
          await handle.close();
        }
      },
      drop: async () => undefined,
    };
  }
  const name = `shutdown_${randomBytes(4).toString('hex')}`;
  const admin = adminPool();
  await admin.query(`create database ${name}`);
  await admin.end();
  return {
    env: { DATABASE_URL: databaseUrl(name) },
    async usageRows() {
      const handle = postgresHandle(createPgPool(databaseUrl(name), 1));
      try {
        return await select(handle.db);
      } finally {
        await handle.close();
      }
    },
    async drop() {
      const drop = adminPool();
      await drop.query(`drop database if exists ${name} with (force)`);
      await drop.end();
    },
  };
}
