import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { createPglite, pgliteDataPath, pgliteHandle, postgresHandle } from '../../src/db/index.js';
import { databaseFault, DatabaseUnavailable } from '../../src/db/faults.js';
import { MAX_BIND_PARAMETERS, TooManyParametersError } from '../../src/db/limits.js';
import { createTestApp, createUserWithKey, testConfig, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';

let app: App | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

/** A statement of `count` bind parameters, sent to PGlite past the guard that refuses it in the app. */
function oversized(count: number): [string, number[]] {
  const params = Array.from({ length: count }, (_, i) => i);
  return [`select 1 as x where -1 in (${params.map((_, i) => `$${i + 1}::int`).join(', ')})`, params];
}

/** An embedded database kept in a data directory (so that it can be reopened), from the run's template. */
async function databaseOnDataDir() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-faults-'));
  const dump = new Blob([fs.readFileSync(inject('pgliteTemplate'))]);
  const pglite = await createPglite({ dataDir: pgliteDataPath(dataDir), loadDataDir: dump });
  return { dataDir, database: pgliteHandle(pglite, { dataDir }) };
}

/** The app on an embedded database kept in a data directory. */
async function appOnDataDir(): Promise<App> {
  const { dataDir, database } = await databaseOnDataDir();
  return buildApp(testConfig({ DATA_DIR: dataDir, AUTH_CACHE_TTL_MS: '0' }), { database });
}

/** Ends the thread PGlite runs in, as a crash of it would (the handle keeps its worker private). */
async function stopWorkerThread(app: App): Promise<void> {
  await (app.database.embedded!.instance as unknown as { worker: Worker }).worker.terminate();
}

async function expectServing(app: App, user: TestUser) {
  const models = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
  expect(models.statusCode, models.body).not.toBe(401);
  expect(models.statusCode, models.body).toBeLessThan(500);
}

describe('the bind-parameter guard', () => {
  it('refuses a statement past the protocol limit before it reaches the database, which keeps serving', async () => {
    app = await createTestApp({}, (a) => {
      a.get('/v1/probe/many', async () => sql`select 1 where 1 in (${sql.join(Array.from({ length: MAX_BIND_PARAMETERS + 1 }, () => 1))})`.execute(a.db));
    });
    await expect(sql`select ${sql.join(Array.from({ length: MAX_BIND_PARAMETERS + 1 }, () => 1))}`.execute(app.db)).rejects.toThrow(TooManyParametersError);
    const user = await createUserWithKey(app);
    const response = await app.inject({ method: 'GET', url: '/v1/probe/many', headers: user.headers });
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [
        {
          type: 'value_error',
          loc: ['body'],
          msg: `Value error, the request names too many values to process at once (at most ${MAX_BIND_PARAMETERS}); send fewer in each request`,
          input: null,
          ctx: { error: 'too many values' },
        },
      ],
    });
    const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
    expect(check.json().database).toEqual({ success: true, duration_ms: expect.any(Number) });
  });
});

// Reopening a data directory takes seconds on a loaded machine.
describe.skipIf(onPostgresServer)('a corrupted embedded database', { timeout: 120_000 }, () => {
  it('is seen by the system check, reopened from its data directory, and serves its data again', async () => {
    app = await appOnDataDir();
    const user = await createUserWithKey(app);
    // PGlite's protocol parser misreads 32,768+ parameters and then answers every query with no rows.
    const [text, params] = oversized(40_000);
    await app.database.embedded!.instance.query(text, params).catch(() => undefined);
    expect((await app.database.embedded!.instance.query('select 1 as x')).rows).toEqual([]);

    const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
    expect(check.statusCode).toBe(503);
    expect(check.json().database).toEqual({
      success: false,
      duration_ms: expect.any(Number),
      error: 'The embedded database answered a probe wrongly and was reopened.',
    });
    await expectServing(app, user);
    const again = await app.inject({ method: 'GET', url: '/v1/system-check' });
    expect(again.json().database).toEqual({ success: true, duration_ms: expect.any(Number) });
  });

  it('is reopened right after a query fails inside PGlite, so the next request is served', async () => {
    app = await appOnDataDir();
    const user = await createUserWithKey(app);
    const [text, params] = oversized(120_000); // this count makes the parser throw
    await expect(app.database.embedded!.query(text, params)).rejects.toThrow(RangeError);
    await expectServing(app, user);
  });

  it('is reopened from its data directory when its worker thread dies, and serves its data again', async () => {
    app = await appOnDataDir();
    const user = await createUserWithKey(app);
    await stopWorkerThread(app);
    await expect(app.database.embedded!.query('select 1 as x')).rejects.toThrow("The embedded database's worker thread stopped");
    await expectServing(app, user);
    const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
    expect(check.json().database).toEqual({ success: true, duration_ms: expect.any(Number) });
  });

  it('in memory, answers 503 once its worker thread died', async () => {
    app = await createTestApp({ AUTH_CACHE_TTL_MS: '0' });
    const user = await createUserWithKey(app);
    await stopWorkerThread(app);
    const during = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
    expect(during.statusCode).toBe(503);
    const after = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
    expect(after.statusCode).toBe(503);
    expect(after.json()).toEqual({ detail: 'The embedded database failed and cannot be reopened (it is in memory). Restart the server.' });
  });

  it('in memory, answers every request 503 with Retry-After rather than serving from a corrupt instance', async () => {
    app = await createTestApp({ AUTH_CACHE_TTL_MS: '0' });
    const user = await createUserWithKey(app);
    const [text, params] = oversized(120_000);
    await expect(app.database.embedded!.query(text, params)).rejects.toThrow(RangeError);
    const response = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('5');
    expect(response.json()).toEqual({ detail: 'The embedded database failed and cannot be reopened (it is in memory). Restart the server.' });
    const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
    expect(check.statusCode).toBe(503);
    expect(check.json().database.success).toBe(false);
  });
});

describe.skipIf(onPostgresServer)('an embedded database that is closing', { timeout: 120_000 }, () => {
  it('answers what was sent before its close began, fails what comes after with "closed" (503) and never reopens its data directory', async () => {
    const { database } = await databaseOnDataDir();
    const embedded = database.embedded!;
    const opened = embedded.instance;
    const logged: string[] = [];
    embedded.useLog({ error: (_details, message) => logged.push(message), warn: (_details, message) => logged.push(message) });

    // The worker takes statements in the order they were posted: this one before the close, the others after it
    // (requests that were waiting for the one connection when the server began to shut down).
    const before = embedded.query('select 1 as x');
    const closing = embedded.close();
    const after = await Promise.allSettled([embedded.query('select 2 as x'), embedded.query('select 3 as x')]);
    await closing;
    try {
      expect((await before).rows).toEqual([{ x: 1 }]);
      for (const result of after) {
        expect(result.status).toBe('rejected');
        const error = (result as PromiseRejectedResult).reason as unknown;
        expect(error).toBeInstanceOf(DatabaseUnavailable);
        expect(databaseFault(error)).toEqual({ code: 'database_unavailable', message: 'The embedded database is closed.' });
      }
      await expect(sql`select 1 as x`.execute(database.db)).rejects.toThrow(new DatabaseUnavailable('The embedded database is closed.'));
      expect(logged).toEqual([]);
      expect(embedded.instance).toBe(opened);
    } finally {
      await database.close();
      await embedded.instance.close(); // an instance reopened after the close would hold the data directory still
    }
  });
});

describe.skipIf(onPostgresServer)('a closed embedded database handle', () => {
  it('closes its instance even when it never ran a statement, and answers later statements "closed" (503)', async () => {
    const { dataDir, database } = await databaseOnDataDir();
    const instance = database.embedded!.instance;
    try {
      await database.close();
      await expect(instance.query('select 1 as x')).rejects.toThrow(new DatabaseUnavailable('The embedded database is closed.'));
      const error = await sql`select 1 as x`.execute(database.db).then(
        () => undefined,
        (reason: unknown) => reason,
      );
      expect(databaseFault(error)).toEqual({ code: 'database_unavailable', message: 'The embedded database is closed.' });
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('a closed server database handle', () => {
  it('answers a statement after its close as the database unavailable (503), not as a bug', async () => {
    // Nothing listens on port 9: the first statement starts kysely's driver (and fails), as a served request would have.
    const database = postgresHandle(new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:9/none', connectionTimeoutMillis: 1_000 }));
    await sql`select 1 as x`.execute(database.db).catch(() => undefined);
    await database.close();
    const error = await sql`select 1 as x`.execute(database.db).then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect((error as Error).message).toBe('driver has already been destroyed');
    expect(databaseFault(error)).toEqual({ code: 'database_unavailable', message: 'The database is unavailable. Try again shortly.' });
  });
});
