import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { loadConfig, type Config } from '../../src/config.js';
import { freshDatabase } from './database.js';

/** A config for tests: quiet logs, a throwaway data dir, no bootstrap admin, plus any overrides. */
export function testConfig(env: Record<string, string> = {}): Config {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-data-'));
  return loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', BOOTSTRAP_ADMIN: 'false', PORT: '0', ...env });
}

/**
 * The app on a fresh database. Close it with `app.close()` (afterEach / afterAll).
 * `setup` runs before the app is ready, to add routes a test needs (probes of the error forms, say).
 */
export async function createTestApp(env: Record<string, string> = {}, setup?: (app: App) => void): Promise<App> {
  const app = await buildApp(testConfig(env), { database: await freshDatabase() });
  setup?.(app);
  await app.ready();
  return app;
}

/** A name no other test uses, for users, teams and projects. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

export interface TestUser {
  username: string;
  /** The user's own entity (same name as the user). */
  entity: string;
  key: string;
  keyId: string;
  headers: { authorization: string };
}

export async function createUserWithKey(
  app: App,
  options: { prefix?: string; isAdmin?: boolean; kind?: 'user' | 'worker' } = {},
): Promise<TestUser> {
  const username = uniqueName(options.prefix ?? 'user');
  const user = await app.auth.createUser({ username, isAdmin: options.isAdmin });
  const { key, record } = await app.auth.createKey({ username, kind: options.kind });
  return { username, entity: user.entity, key, keyId: record.id, headers: { authorization: `Bearer ${key}` } };
}

/**
 * Registers a test file's hooks for one app and one user with a key: both made before its first test and
 * handed to `use`, the app closed after its last test.
 */
export function appWithUser(use: (made: { app: App; user: TestUser }) => void): void {
  let app: App | undefined;
  beforeAll(async () => {
    app = await createTestApp();
    use({ app, user: await createUserWithKey(app) });
  });
  afterAll(async () => {
    await app?.close();
  });
}

/** A worker key for an existing user. */
export async function createWorkerKey(app: App, username: string): Promise<{ key: string; headers: { authorization: string } }> {
  const { key } = await app.auth.createKey({ username, kind: 'worker' });
  return { key, headers: { authorization: `Bearer ${key}` } };
}
