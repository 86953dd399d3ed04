import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { createUserWithKey, testConfig, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';
import { adminPool, databaseUrl, TEST_DATABASE_URL } from '../helpers/postgres.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

const UNAVAILABLE = 'The database is unavailable. Try again shortly.';
const TIMED_OUT = 'The database did not answer within the statement timeout (DATABASE_STATEMENT_TIMEOUT_MS). Try again shortly, or ask for less at once.';

describe.skipIf(!onPostgresServer)('a PostgreSQL server that goes away', () => {
  let name: string;
  let proxy: TcpProxy;
  let app: App;
  let user: TestUser;

  beforeAll(async () => {
    name = `${inject('pgTemplate').replace('tpl', 't')}_${randomBytes(4).toString('hex')}`;
    const admin = adminPool();
    await admin.query(`create database ${name} template ${inject('pgTemplate')}`);
    await admin.end();
    const server = new URL(TEST_DATABASE_URL!);
    proxy = await TcpProxy.start({ host: server.hostname, port: Number(server.port || 5432) });
    const url = new URL(databaseUrl(name));
    url.port = String(proxy.port);
    // No auth cache: every request authenticates its key against the database.
    app = await buildApp(
      testConfig({ DATABASE_URL: url.toString(), AUTH_CACHE_TTL_MS: '0', DATABASE_POOL_TIMEOUT_MS: '1000', DATABASE_STATEMENT_TIMEOUT_MS: '1000' }),
    );
    app.get('/v1/probe/slow', async () => sql`select pg_sleep(3)`.execute(app.db));
    user = await createUserWithKey(app);
  });
  afterEach(async () => {
    proxy.thaw();
    if (!proxy.port || !(await expectServing().then(() => true, () => false))) await proxy.up().catch(() => undefined);
  });
  afterAll(async () => {
    await app.close();
    await proxy.close();
    const admin = adminPool();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  });

  async function expectServing() {
    const response = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
    expect(response.statusCode, response.body).toBe(200);
  }

  /** One database-backed route of each API, authenticated with a key the cache does not hold. */
  async function expectEveryApi503(message: string, code: string) {
    const training = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
    expect(training.statusCode).toBe(503);
    expect(training.headers['retry-after']).toBe('5');
    expect(training.json()).toEqual({ detail: message });

    const tracing = await app.inject({
      method: 'POST',
      url: '/traces/calls/stream_query',
      headers: { ...user.headers, 'content-type': 'application/json' },
      payload: { project_id: `${user.entity}/p` },
    });
    expect(tracing.statusCode).toBe(503);
    expect(tracing.headers['retry-after']).toBe('5');
    expect(tracing.json()).toEqual({ reason: message });

    const inference = await app.inject({ method: 'GET', url: '/v1/models', headers: user.headers });
    expect(inference.statusCode).toBe(503);
    expect(inference.headers['retry-after']).toBe('5');
    expect(inference.json()).toEqual({ error: { message, type: 'server_error', param: null, code } });

    const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
    expect(check.statusCode).toBe(503);
    expect(check.json().database).toEqual({ success: false, duration_ms: expect.any(Number), error: expect.any(String) });
  }

  it('down: every database-backed route and key check answers 503 with Retry-After, and serves again once it is back', async () => {
    await expectServing();
    await proxy.down();
    await expectEveryApi503(UNAVAILABLE, 'database_unavailable');
    await proxy.up();
    await expectServing();
  });

  it('frozen with connections open: requests fail at the query timeout with 503, and are served once it answers again', async () => {
    await expectServing(); // the pool holds an idle connection
    proxy.freeze();
    await expectEveryApi503(TIMED_OUT, 'database_timeout');
    proxy.thaw();
    await expectServing();
  });

  it('frozen for new connections: requests fail at the connect timeout with 503', async () => {
    proxy.freeze();
    proxy.dropConnections(); // the pool must connect anew, and the server never answers
    await new Promise((resolve) => setTimeout(resolve, 100)); // the pool sees its idle connections close
    await expectEveryApi503(UNAVAILABLE, 'database_unavailable');
    proxy.thaw();
    await expectServing();
  });

  it('a statement past DATABASE_STATEMENT_TIMEOUT_MS is cancelled by the server and answers 503', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/probe/slow', headers: user.headers });
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('5');
    expect(response.json()).toEqual({ detail: TIMED_OUT });
    await expectServing();
  });
});
