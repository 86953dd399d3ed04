import { request as undiciRequest } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { closeGracefully } from '../../src/server.js';
import { createUserWithKey, testConfig } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
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
    const database = await freshDatabase();
    // The app closes its database at the end of shutdown; keep it open to read what was written.
    const app = await buildApp(
      testConfig({ BACKENDS_FILE: writeBackendsFile([backendEntry('quick', [quick.url], { models: ['fake/quick'] }), backendEntry('endless', [endless.url], { models: ['fake/endless'] })]), USAGE_FLUSH_INTERVAL_MS: '60000' }),
      { database: { ...database, close: async () => undefined } },
    );
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

      const rows = await database.db.selectFrom('usage_records').select(['request_id', 'outcome', 'completion_tokens', 'estimated']).orderBy('request_id').execute();
      expect(rows).toEqual([
        { request_id: 'shutdown-cut-1', outcome: 'client_disconnected', completion_tokens: expect.any(Number), estimated: true },
        { request_id: 'shutdown-quick-1', outcome: 'success', completion_tokens: 4, estimated: false },
        { request_id: 'shutdown-quick-2', outcome: 'success', completion_tokens: 4, estimated: false },
        { request_id: 'shutdown-quick-3', outcome: 'success', completion_tokens: 4, estimated: false },
      ]);
      expect(rows[0].completion_tokens).toBeGreaterThan(0);
    } finally {
      await database.close();
    }
  });
});
