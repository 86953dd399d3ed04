import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { ConflictError } from '../../src/errors.js';
import { createTestApp, createUserWithKey, createWorkerKey, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';
import { startScript } from '../helpers/processes.js';

const LAST_ADMIN_KEY = (id: string) =>
  `API key ${id} is the last active API key of an admin: revoking it would leave nobody able to manage this server (every admin call would be refused). ` +
  'Create another admin key first (npm run cli -- keys create <admin username>, or POST /v1/admin/keys), then revoke this one.';

describe('revoking the last admin key', () => {
  let app: App;
  beforeAll(async () => {
    app = await createTestApp(); // a fresh database, no bootstrap admin
  });
  afterAll(async () => {
    await app.close();
  });

  const revoke = (by: TestUser, keyId: string) => app.inject({ method: 'POST', url: `/v1/admin/keys/${keyId}/revoke`, headers: by.headers });
  const liveKeys = async () =>
    (await app.db.selectFrom('api_keys').select('id').where('revoked_at', 'is', null).orderBy('id').execute()).map((r) => r.id).sort();

  it('is refused with 409, even with worker keys and non-admin keys left, and nothing is revoked', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    await createWorkerKey(app, admin.username); // a worker key cannot manage the server
    await createUserWithKey(app); // nor can a user who is not an admin
    const before = await liveKeys();

    const refused = await revoke(admin, admin.keyId);
    expect([refused.statusCode, refused.json()]).toEqual([409, { detail: LAST_ADMIN_KEY(admin.keyId) }]);
    expect(await liveKeys()).toEqual(before);
    expect((await app.inject({ url: '/v1/admin/users', headers: admin.headers })).statusCode).toBe(200);

    // With a second admin key made first, the first can go; then the second is the last.
    const second = await app.auth.createKey({ username: admin.username });
    const other: TestUser = { ...admin, key: second.key, keyId: second.record.id, headers: { authorization: `Bearer ${second.key}` } };
    const ok = await revoke(other, admin.keyId);
    expect([ok.statusCode, ok.json()]).toEqual([200, { id: admin.keyId, revoked: true }]);
    const last = await revoke(other, other.keyId);
    expect([last.statusCode, last.json()]).toEqual([409, { detail: LAST_ADMIN_KEY(other.keyId) }]);
    expect(await liveKeys()).toContain(other.keyId);
  });

  it('two concurrent revokes of the last two admin keys leave one', async () => {
    const users = await app.auth.listUsers();
    const live = await app.auth.listKeys();
    const adminKeys = live.filter((k) => k.kind === 'user' && !k.revokedAt && users.find((u) => u.username === k.username)?.isAdmin);
    expect(adminKeys).toHaveLength(1);
    const another = await createUserWithKey(app, { isAdmin: true }); // a second admin user: two admin keys in all
    for (let round = 0; round < 3; round++) {
      const pair = [adminKeys[0]!.id, another.keyId];
      const results = await Promise.allSettled(pair.map((keyId) => app.auth.revokeKey({ keyId })));
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect(rejected.reason).toBeInstanceOf(ConflictError);
      const left = (await liveKeys()).filter((id) => pair.includes(id));
      expect(left).toHaveLength(1);
      // Undo for the next round: a new key in the place of the one revoked.
      const revokedIndex = pair.findIndex((id) => !left.includes(id));
      const owner = revokedIndex === 0 ? adminKeys[0]!.username : another.username;
      const fresh = await app.auth.createKey({ username: owner });
      if (revokedIndex === 0) adminKeys[0] = fresh.record;
      else another.keyId = fresh.record.id;
    }
  });
});

/** The CLI as a newcomer runs it, on a data directory no server holds: it opens the database itself. */
describe.skipIf(onPostgresServer)('the CLI on the database directly', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-cli-keys-'));
  afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

  async function cli(...args: string[]): Promise<{ code: number | null; out: string; err: string }> {
    const run = startScript('src/cli/main.ts', args, { ...process.env, DATA_DIR: dataDir, DATABASE_URL: '', LOG_LEVEL: 'silent' });
    const code = await run.exited;
    return { code, out: run.out(), err: run.err() };
  }

  it('refuses the key names the admin API refuses, in the same words, and stores nothing', { timeout: 120_000 }, async () => {
    expect((await cli('users', 'create', 'alice')).code).toBe(0);
    // The admin API's answers to the same bodies, whose detail the CLI prints as `loc: msg` after the status.
    const app = await createTestApp();
    try {
      const admin = await createUserWithKey(app, { isAdmin: true });
      await app.auth.createUser({ username: 'alice' });
      for (const [name, msg] of [
        ['', 'String should have at least 1 character'],
        ['n'.repeat(100_000), 'String should have at most 200 characters'],
      ] as const) {
        const api = await app.inject({ method: 'POST', url: '/v1/admin/keys', headers: admin.headers, payload: { username: 'alice', name, kind: 'user' } });
        expect(api.statusCode).toBe(422);
        expect(api.json().detail.map((d: { loc: unknown; msg: unknown }) => [d.loc, d.msg])).toEqual([[['body', 'name'], msg]]);

        const direct = await cli('keys', 'create', 'alice', '--name', name);
        expect([direct.code, direct.err, direct.out]).toEqual([1, `422: name: ${msg}\n`, '']);
      }
    } finally {
      await app.close();
    }
    const list = await cli('keys', 'list', '--user', 'alice');
    expect(list.code).toBe(0);
    expect(JSON.parse(list.out)).toEqual({ data: [] });
    // A valid name is still taken.
    const ok = await cli('keys', 'create', 'alice', '--name', 'laptop');
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.out)).toMatchObject({ username: 'alice', name: 'laptop', kind: 'user', key: expect.stringMatching(/^ty_/) });
  });
});
