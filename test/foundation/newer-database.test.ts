import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { createTestApp, createUserWithKey, createWorkerKey, testConfig, type TestUser } from '../helpers/app.js';
import { embeddedDatabaseIn, onPostgresServer } from '../helpers/database.js';
import { adminPool, databaseUrl } from '../helpers/postgres.js';

/**
 * A process still running while another process, of a newer release, migrates the database they share
 * (README, "Running against a PostgreSQL server"): it stops serving from a schema it does not know, with
 * 503s that say why, instead of failing requests as if they were bugs.
 */

const NEWER = 'this database was migrated by a newer trainyard (0099_future is not a migration of this build): run that release, or restore a backup taken before the upgrade';

const apps: App[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** What another process of a newer release leaves in kysely's table once it migrated. */
async function migrateAsNewerRelease(app: App): Promise<void> {
  await sql`insert into kysely_migration (name, timestamp) values ('0099_future', now()::text)`.execute(app.db);
}

async function expectServing(app: App, user: TestUser): Promise<void> {
  const response = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
  expect(response.statusCode, response.body).toBe(200);
}

/** One database-backed route of each API, the worker claim among them, and the system check. */
async function expectEveryApiRefused(app: App, { user, worker }: Serving): Promise<void> {
  const training = await app.inject({ method: 'GET', url: '/v1/preview/models', headers: user.headers });
  expect([training.statusCode, training.headers['retry-after'], training.json()]).toEqual([503, '5', { detail: NEWER }]);

  const claim = await app.inject({
    method: 'POST',
    url: '/v1/workers/claim',
    headers: { ...worker.headers, 'content-type': 'application/json' },
    payload: { worker_id: 'w1', base_models: ['Qwen/Qwen3-14B'], wait_seconds: 0 },
  });
  expect([claim.statusCode, claim.json()]).toEqual([503, { detail: NEWER }]);

  const tracing = await app.inject({
    method: 'POST',
    url: '/traces/calls/stream_query',
    headers: { ...user.headers, 'content-type': 'application/json' },
    payload: { project_id: `${user.entity}/p` },
  });
  expect([tracing.statusCode, tracing.headers['retry-after'], tracing.json()]).toEqual([503, '5', { reason: NEWER }]);

  const inference = await app.inject({ method: 'GET', url: '/v1/models', headers: user.headers });
  expect([inference.statusCode, inference.headers['retry-after'], inference.json()]).toEqual([
    503,
    '5',
    { error: { message: NEWER, type: 'server_error', param: null, code: 'database_unavailable' } },
  ]);

  const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
  expect(check.statusCode).toBe(503);
  expect(check.json().database).toEqual({ success: false, duration_ms: expect.any(Number), error: NEWER });

  // Liveness needs no database: a supervisor sees the process up and the system check failing.
  expect((await app.inject({ method: 'GET', url: '/v1/health' })).statusCode).toBe(200);
}

const LOGGED = {
  details: { unknown_migrations: ['0099_future'] },
  message: 'another process migrated the database past this build: every request that needs the database answers 503 until this process is replaced by the release that migrated it',
};

/** The errors the app's database handle logs from now on. */
function loggedErrors(app: App): { details: Record<string, unknown>; message: string }[] {
  const logged: { details: Record<string, unknown>; message: string }[] = [];
  app.database.useLog({ error: (details, message) => logged.push({ details, message }), warn: () => undefined });
  return logged;
}

/** A user and a worker key of theirs, made while the database serves. */
interface Serving {
  user: TestUser;
  worker: { headers: { authorization: string } };
}

async function serving(app: App): Promise<Serving> {
  apps.push(app);
  const user = await createUserWithKey(app);
  return { user, worker: await createWorkerKey(app, user.username) };
}

/**
 * The app as a server opens it, from DATA_DIR or DATABASE_URL (so that the check runs on the lease sweep's
 * interval from the config), on a copy of the run's migrated database.
 */
async function openedAsServer(env: Record<string, string>): Promise<App> {
  if (onPostgresServer) {
    const name = `${inject('pgTemplate').replace('tpl', 't')}_${randomBytes(4).toString('hex')}`;
    const admin = adminPool();
    await admin.query(`create database ${name} template ${inject('pgTemplate')}`);
    await admin.end();
    cleanups.push(async () => {
      const drop = adminPool();
      await drop.query(`drop database if exists ${name} with (force)`);
      await drop.end();
    });
    return buildApp(testConfig({ ...env, DATABASE_URL: databaseUrl(name) }));
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-newer-'));
  cleanups.push(async () => fs.rmSync(dataDir, { recursive: true, force: true }));
  await (await embeddedDatabaseIn(dataDir)).close();
  return buildApp(testConfig({ ...env, DATA_DIR: dataDir }));
}

describe('a running process whose database another process migrated past its build', () => {
  it('answers 503 with the NewerDatabaseError message on every route that needs the database, and fails the system check with it', async () => {
    const app = await createTestApp();
    const keys = await serving(app);
    const logged = loggedErrors(app);
    await app.database.checkMigrations();
    await expectServing(app, keys.user);

    await migrateAsNewerRelease(app);
    await app.database.checkMigrations();
    await expectEveryApiRefused(app, keys);
    await app.database.checkMigrations();
    expect(logged).toEqual([LOGGED]);
  });

  it('notices by itself within the lease sweep interval, and logs it once', async () => {
    const app = await openedAsServer({ LEASE_SWEEP_INTERVAL_MS: '100' });
    await app.ready();
    const keys = await serving(app);
    const logged = loggedErrors(app);
    await expectServing(app, keys.user);

    await migrateAsNewerRelease(app);
    await expect.poll(async () => (await app.inject({ method: 'GET', url: '/v1/preview/models', headers: keys.user.headers })).statusCode, { timeout: 5_000 }).toBe(503);
    await expectEveryApiRefused(app, keys);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(logged).toEqual([LOGGED]);
  });
});
