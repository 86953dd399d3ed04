import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { hashApiKey } from '../../src/auth/keys.js';
import { createTestApp, createUserWithKey, uniqueName } from '../helpers/app.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused } from '../helpers/tenants.js';

let app: App;
beforeAll(async () => {
  // One authenticated probe route in each API's path space.
  app = await createTestApp({}, (a) => {
    for (const url of ['/v1/probe', '/v1/models/probe', '/traces/probe']) a.get(url, async () => ({ ok: true }));
  });
});
afterAll(async () => {
  await app.close();
});

const basic = (key: string) => `Basic ${Buffer.from(`api:${key}`).toString('base64')}`;

describe('API keys', () => {
  it('are random, prefixed, and stored only as a hash with a display prefix', async () => {
    const user = await createUserWithKey(app);
    const other = await app.auth.createKey({ username: user.username });
    expect(user.key).toMatch(/^ty_[0-9A-Za-z]{40}$/);
    expect(other.key).not.toBe(user.key);
    const row = await app.db.selectFrom('api_keys').selectAll().where('id', '=', user.keyId).executeTakeFirstOrThrow();
    expect(row.key_hash).toBe(hashApiKey(user.key));
    expect(row.prefix).toBe(user.key.slice(0, 11));
    expect(JSON.stringify(row)).not.toContain(user.key);
  });

  it('authenticate with Bearer and with Basic api:<key>, and record when they were last used', async () => {
    const user = await createUserWithKey(app);
    const before = await app.db.selectFrom('api_keys').select('last_used_at').where('id', '=', user.keyId).executeTakeFirstOrThrow();
    expect(before.last_used_at).toBeNull();
    const bearer = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: user.headers });
    // A non-admin user key is authenticated (403, not 401) on an admin route.
    expect(bearer.statusCode).toBe(403);
    const after = await app.db.selectFrom('api_keys').select('last_used_at').where('id', '=', user.keyId).executeTakeFirstOrThrow();
    expect(after.last_used_at).toBeInstanceOf(Date);
    const viaBasic = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: { authorization: basic(user.key) } });
    expect(viaBasic.statusCode).toBe(403);
  });

  it('stop working as soon as they are revoked', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    await createUserWithKey(app, { isAdmin: true }); // the last admin key cannot be revoked
    const ok = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: admin.headers });
    expect(ok.statusCode).toBe(200);
    await app.auth.revokeKey({ keyId: admin.keyId });
    const refused = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: admin.headers });
    expect(refused.statusCode).toBe(401);
    expect(refused.json()).toEqual({ detail: 'Invalid or revoked API key.' });
  });
});

describe('revocation racing a first use', () => {
  it('a key revoked while its first request is being authenticated is not cached as valid', async () => {
    // The key's first use reads its row, then records the use and reads its memberships: a revoke that
    // commits in between must not be undone by the principal read before it.
    for (let i = 0; i < 5; i++) {
      const user = await createUserWithKey(app);
      // The request in flight may see the key or not (on the embedded database it does: queries run in order).
      await Promise.all([app.auth.authenticate(user.key), app.auth.revokeKey({ keyId: user.keyId })]);
      expect(await app.auth.authenticate(user.key)).toBeUndefined();
      const refused = await app.inject({ method: 'GET', url: '/v1/probe', headers: user.headers });
      expect(refused.statusCode).toBe(401);
    }
  });
});

describe('401 in the error form of the API called', () => {
  const missing = 'Missing API key. Send it as "Authorization: Bearer <key>" (or HTTP Basic with the key as the password).';

  it('training API: {"detail": message}', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/probe' });
    expect(response.statusCode).toBe(401);
    expect(response.headers['www-authenticate']).toBe('Bearer');
    expect(response.json()).toEqual({ detail: missing });
  });

  it('inference API: the OpenAI envelope with code invalid_api_key', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/models/probe', headers: { authorization: 'Bearer ty_wrong' } });
    expect(response.statusCode).toBe(401);
    expect(response.json()).toEqual({
      error: { message: 'Invalid or revoked API key.', type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
    });
  });

  it('tracing API: {"reason": message}', async () => {
    const response = await app.inject({ method: 'GET', url: '/traces/probe', headers: { authorization: basic('ty_wrong') } });
    expect(response.statusCode).toBe(401);
    expect(response.json()).toEqual({ reason: 'Invalid or revoked API key.' });
  });

  it('a malformed Authorization header counts as missing', async () => {
    for (const authorization of ['Bearer', 'Token abc', `Basic ${Buffer.from('no-colon').toString('base64')}`]) {
      const response = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: { authorization } });
      expect(response.statusCode).toBe(401);
      expect(response.json()).toEqual({ detail: missing });
    }
  });
});

describe('admin API', () => {
  it('refuses a user or team name that is not 1 to 64 name characters with a 422 naming the field, creating nothing', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    // A key's first use is recorded on the key: that write is not the refused request's.
    await app.inject({ method: 'GET', url: '/v1/admin/users', headers: admin.headers });
    const rule = "use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit.";
    for (const [url, field, kind] of [['/v1/admin/users', 'username', 'user'], ['/v1/admin/teams', 'name', 'team']] as const) {
      const before = await databaseFingerprint(app);
      const response = await app.inject({ method: 'POST', url, headers: admin.headers, payload: { [field]: 'a/b' } });
      expect(response.statusCode).toBe(422);
      expect(response.json()).toEqual({
        detail: [{ type: 'value_error', loc: ['body', field], msg: `Value error, invalid ${kind} name "a/b": ${rule}`, input: 'a/b' }],
      });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
  });
});

describe('key kinds', () => {
  it('a worker key is refused outside /v1/workers', async () => {
    const worker = await createUserWithKey(app, { kind: 'worker', isAdmin: true });
    const response = await app.inject({ method: 'GET', url: '/v1/admin/users', headers: worker.headers });
    expect(response.statusCode).toBe(403);
    expect(response.json()).toEqual({ detail: 'Worker keys may only call /v1/workers/*.' });
  });
});

describe('tenancy', () => {
  it('a key reaches its own entity and the teams its user belongs to, and nothing else', async () => {
    const { owner, other } = await createTenants(app);
    const team = uniqueName('team');
    await app.auth.createTeam({ name: team });
    await app.auth.addMember({ team, username: owner.username });
    const principal = (await app.auth.authenticate(owner.key))!;
    expect([...principal.entities].sort()).toEqual([owner.entity, team].sort());
    const otherPrincipal = (await app.auth.authenticate(other.key))!;
    expect([...otherPrincipal.entities]).toEqual([other.entity]);
  });

  it('lists every team with its members and roles, to admins only', async () => {
    const { owner, other } = await createTenants(app);
    const admin = await createUserWithKey(app, { isAdmin: true });
    const [team, empty] = [uniqueName('team'), uniqueName('team')];
    await app.auth.createTeam({ name: team });
    await app.auth.createTeam({ name: empty });
    await app.auth.addMember({ team, username: owner.username, role: 'admin' });
    await app.auth.addMember({ team, username: other.username });
    const listed = await app.inject({ method: 'GET', url: '/v1/admin/teams', headers: admin.headers });
    expect(listed.statusCode).toBe(200);
    const byName = new Map<string, any>(listed.json().data.map((t: { name: string }) => [t.name, t]));
    // Members come by username in the database's collation; compared here in any order.
    expect({ ...byName.get(team), members: new Set(byName.get(team).members.map(JSON.stringify)) }).toEqual({
      id: expect.any(String),
      name: team,
      created_at: expect.stringMatching(/Z$/),
      members: new Set([{ username: owner.username, role: 'admin' }, { username: other.username, role: 'member' }].map((m) => JSON.stringify(m))),
    });
    expect(byName.get(empty)).toMatchObject({ name: empty, members: [] });
    // Users' own entities are no teams.
    expect(byName.has(owner.entity)).toBe(false);
    const notAdmin = await app.inject({ method: 'GET', url: '/v1/admin/teams', headers: owner.headers });
    expect([notAdmin.statusCode, notAdmin.json()]).toEqual([403, { detail: 'This route needs an admin key.' }]);
    const anonymous = await app.inject({ method: 'GET', url: '/v1/admin/teams' });
    expect([anonymous.statusCode, anonymous.json()]).toEqual([
      401,
      { detail: 'Missing API key. Send it as "Authorization: Bearer <key>" (or HTTP Basic with the key as the password).' },
    ]);
  });

  it('removing a user from a team ends its keys\' reach into the team at once; a second removal is a 404', async () => {
    const { owner } = await createTenants(app);
    const admin = await createUserWithKey(app, { isAdmin: true });
    const team = uniqueName('team');
    await app.auth.createTeam({ name: team });
    await app.auth.addMember({ team, username: owner.username });
    expect((await app.auth.authenticate(owner.key))!.entities.has(team)).toBe(true);
    const remove = (teamName: string, username: string) => app.inject({ method: 'DELETE', url: `/v1/admin/teams/${teamName}/members/${username}`, headers: admin.headers });

    const removed = await remove(team, owner.username);
    expect(removed.statusCode).toBe(200);
    expect(removed.json()).toEqual({ team, username: owner.username, removed: true });
    expect([...(await app.auth.authenticate(owner.key))!.entities]).toEqual([owner.entity]);

    const again = await remove(team, owner.username);
    expect(again.statusCode).toBe(404);
    expect(again.json()).toEqual({ detail: `${owner.username} is not a member of team ${team}` });
    // A user's own entity is not a team.
    const own = await remove(owner.entity, owner.username);
    expect(own.statusCode).toBe(404);
    expect(own.json()).toEqual({ detail: `team ${owner.entity} not found` });
    const notAdmin = await app.inject({ method: 'DELETE', url: `/v1/admin/teams/${team}/members/${owner.username}`, headers: owner.headers });
    expect(notAdmin.statusCode).toBe(403);
  });

  it('the two-tenant helper detects a route that answers the other tenant', async () => {
    const { other } = await createTenants(app);
    // /v1/health answers anyone with 200: the helper must fail on it.
    await expect(
      expectOtherTenantRefused(app, { method: 'GET', url: '/v1/health', headers: other.headers }, { status: 404 }),
    ).rejects.toThrow();
  });

  it('the database fingerprint changes when anything is written', async () => {
    const before = await databaseFingerprint(app);
    await createUserWithKey(app);
    expect(await databaseFingerprint(app)).not.toEqual(before);
  });
});
