import type { InjectOptions } from 'fastify';
import { sql } from 'kysely';
import { expect } from 'vitest';
import type { App } from '../../src/app.js';
import { createUserWithKey, type TestUser } from './app.js';

/** Two users in different entities, each with a key: `owner` makes things, `other` must not see them. */
export async function createTenants(app: App): Promise<{ owner: TestUser; other: TestUser }> {
  return { owner: await createUserWithKey(app, { prefix: 'owner' }), other: await createUserWithKey(app, { prefix: 'other' }) };
}

/** A request as `as` (a user, or a user with a worker key's headers), with a JSON body when one is given. */
export function jsonRequest(method: InjectOptions['method'], url: string, as: TestUser, body?: unknown): InjectOptions {
  return {
    method,
    url,
    headers: body === undefined ? as.headers : { ...as.headers, 'content-type': 'application/json' },
    payload: body === undefined ? undefined : JSON.stringify(body),
  };
}

/**
 * A digest of every row of every table, to prove that a rejected request wrote nothing.
 * Test databases are small, so hashing them whole is cheap.
 */
export async function databaseFingerprint(app: App): Promise<Record<string, string>> {
  const { rows } = await sql<{ table_name: string }>`
    select table_name from information_schema.tables
    where table_schema = 'public' and table_type = 'BASE TABLE' and table_name not like 'kysely_%'
    order by table_name`.execute(app.db);
  const result: Record<string, string> = {};
  for (const { table_name } of rows) {
    const digest = await sql<{ digest: string | null }>`
      select md5(coalesce(string_agg(t::text, '|' order by t::text), '')) as digest from ${sql.table(table_name)} t`.execute(app.db);
    result[table_name] = digest.rows[0]?.digest ?? '';
  }
  return result;
}

/**
 * Asserts that `other` calling a route on `owner`'s resource gets the expected status and body, that
 * the body leaks none of `secrets` (names, ids, contents of the owner's data), and that the database
 * is unchanged afterwards.
 */
export async function expectOtherTenantRefused(
  app: App,
  request: InjectOptions,
  expected: { status: 403 | 404 | 409; body?: unknown; secrets?: string[] },
): Promise<void> {
  const before = await databaseFingerprint(app);
  const response = await app.inject(request);
  expect(response.statusCode, response.body).toBe(expected.status);
  if (expected.body !== undefined) expect(response.json()).toEqual(expected.body);
  for (const secret of expected.secrets ?? []) expect(response.body).not.toContain(secret);
  expect(await databaseFingerprint(app)).toEqual(before);
}
