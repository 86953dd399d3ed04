import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema.js';
import { ConflictError, NotFoundError, UnprocessableError } from '../errors.js';
import { randomBytes } from 'node:crypto';
import { displayPrefix, generateApiKey, hashApiKey } from './keys.js';
import type { KeyKind, Principal } from './principal.js';
import * as repo from './repository.js';
import * as sessions from './sessions.js';

export type { ApiKeyRecord, TeamRecord, UserRecord } from './repository.js';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** `last_used_at` is written at most this often per key, so that a busy key costs no write per request. */
const TOUCH_INTERVAL_MS = 60_000;
/** A web UI session ends after this long without use, and at the latest SESSION_MAX_MS after sign-in. */
export const SESSION_IDLE_MS = 12 * 3_600_000;
export const SESSION_MAX_MS = 7 * 24 * 3_600_000;

export interface CreatedKey {
  /** The secret: shown once, never stored. */
  key: string;
  record: repo.ApiKeyRecord;
}

/** A name the admin API's body carries (`param`), refused in the 422 form every API uses for invalid requests. */
function checkName(kind: string, name: string, param: string): void {
  if (!NAME.test(name)) {
    throw new UnprocessableError(
      `Value error, invalid ${kind} name ${JSON.stringify(name)}: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit.`,
      ['body', param],
      { input: name },
    );
  }
}

/**
 * Users, teams, memberships and API keys. Resolved keys are cached for `cacheTtlMs`; revoking through
 * this service drops its cache entry at once, while other processes see a revocation within the TTL.
 */
export class AuthService {
  private readonly cache = new Map<string, { principal: Principal; expiresAt: number }>();
  /**
   * Counts the changes that drop cached principals (a revoke, a membership). A principal read before one of
   * them is not cached: the revoke may have committed between reading the key and caching what was read.
   */
  private changes = 0;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly cacheTtlMs: number,
  ) {}

  async createUser(args: { username: string; isAdmin?: boolean }): Promise<repo.UserRecord> {
    checkName('user', args.username, 'username');
    const created = await this.db.transaction().execute((trx) => insertUserWithEntity(trx, { username: args.username, isAdmin: args.isAdmin ?? false }));
    if (!created) throw new ConflictError(`The name ${args.username} is already taken by a user or team.`, { param: 'username' });
    return (await repo.findUser(this.db, { username: args.username }))!;
  }

  listUsers(): Promise<repo.UserRecord[]> {
    return repo.listUsers(this.db);
  }

  listTeams(): Promise<repo.TeamRecord[]> {
    return repo.listTeams(this.db);
  }

  async createTeam(args: { name: string }): Promise<{ id: string; name: string }> {
    checkName('team', args.name, 'name');
    const id = randomUUID();
    if (!(await repo.insertEntity(this.db, { id, name: args.name, kind: 'team' }))) {
      throw new ConflictError(`The name ${args.name} is already taken by a user or team.`, { param: 'name' });
    }
    return { id, name: args.name };
  }

  async addMember(args: { team: string; username: string; role?: 'admin' | 'member' }): Promise<void> {
    const team = await repo.findEntity(this.db, { name: args.team });
    if (!team || team.kind !== 'team') throw new NotFoundError('team', args.team, { param: 'team' });
    const user = await repo.findUser(this.db, { username: args.username });
    if (!user) throw new NotFoundError('user', args.username, { param: 'username' });
    await repo.upsertMembership(this.db, { entityId: team.id, userId: user.id, role: args.role ?? 'member' });
    this.changes++;
    this.cache.clear(); // memberships changed: cached principals may now reach more
  }

  /**
   * Takes a user out of a team: the user's keys (and their workers) stop reaching the team's projects and
   * jobs, at once in this process and within the cache's TTL in others. A user's own entity is not a team.
   */
  async removeMember(args: { team: string; username: string }): Promise<void> {
    const team = await repo.findEntity(this.db, { name: args.team });
    if (!team || team.kind !== 'team') throw new NotFoundError('team', args.team, { param: 'team' });
    const user = await repo.findUser(this.db, { username: args.username });
    if (!user) throw new NotFoundError('user', args.username, { param: 'username' });
    if (!(await repo.deleteMembership(this.db, { entityId: team.id, userId: user.id }))) {
      throw new NotFoundError('membership', undefined, { param: 'username', message: `${args.username} is not a member of team ${args.team}` });
    }
    this.changes++;
    this.cache.clear();
  }

  async createKey(args: { username: string; name?: string; kind?: KeyKind }): Promise<CreatedKey> {
    const user = await repo.findUser(this.db, { username: args.username });
    if (!user) throw new NotFoundError('user', args.username, { param: 'username' });
    const kind = args.kind ?? 'user';
    const { key, id } = await insertKey(this.db, { userId: user.id, name: args.name ?? `${kind} key`, kind });
    const record = (await repo.listApiKeys(this.db, { userId: user.id })).find((k) => k.id === id)!;
    return { key, record };
  }

  async listKeys(args: { username?: string } = {}): Promise<repo.ApiKeyRecord[]> {
    if (args.username === undefined) return repo.listApiKeys(this.db, {});
    const user = await repo.findUser(this.db, { username: args.username });
    if (!user) throw new NotFoundError('user', args.username, { param: 'username' });
    return repo.listApiKeys(this.db, { userId: user.id });
  }

  /**
   * Revokes a key, but never the last live user key of an admin (409): with none left, every admin call
   * would be 401 and, while a server holds the embedded database, the CLI (which goes through it) could not
   * make a new one. The check and the revoke are one transaction holding the admin keys' rows, so two
   * revokes of the last two admin keys cannot both pass. Worker keys do not count: they cannot manage.
   */
  async revokeKey(args: { keyId: string }): Promise<void> {
    const revoked =
      UUID.test(args.keyId) &&
      (await this.db.transaction().execute(async (trx) => {
        const adminKeys = await repo.lockActiveAdminKeys(trx);
        if (adminKeys.length === 1 && adminKeys[0] === args.keyId) {
          throw new ConflictError(
            `API key ${args.keyId} is the last active API key of an admin: revoking it would leave nobody able to manage this server (every admin call would be refused). ` +
              'Create another admin key first (npm run cli -- keys create <admin username>, or POST /v1/admin/keys), then revoke this one.',
            { code: 'last_admin_key', param: 'key_id' },
          );
        }
        return repo.revokeApiKey(trx, { keyId: args.keyId, at: new Date() });
      }));
    if (!revoked) throw new NotFoundError('API key', args.keyId, { param: 'key_id' });
    this.changes++;
    for (const [hash, entry] of this.cache) if (entry.principal.keyId === args.keyId) this.cache.delete(hash);
  }

  /** The principal for a raw key while it is cached, without a promise (the common case of every request). */
  cachedPrincipal(rawKey: string): Principal | undefined {
    const cached = this.cache.get(hashApiKey(rawKey));
    return cached && cached.expiresAt > Date.now() ? cached.principal : undefined;
  }

  /** The principal for a raw key, or undefined when the key is unknown or revoked. */
  authenticate(rawKey: string): Promise<Principal | undefined> {
    const hash = hashApiKey(rawKey);
    return this.cachedPrincipalOf(hash, () => repo.findKeyOwner(this.db, { keyHash: hash }));
  }

  /**
   * The principal of a key by its id, as a new request with it would get: undefined once the key is
   * revoked, and the entities of its user's memberships, at once after a change made in this process and
   * within the cache's TTL after another's. For requests that wait (a worker's claim) and act later;
   * cached beside the keys (under `id:<key id>`), so that waiters woken together cost one read.
   */
  currentPrincipal(keyId: string): Promise<Principal | undefined> {
    return this.cachedPrincipalOf(`id:${keyId}`, () => repo.findKeyOwner(this.db, { keyId }));
  }

  /** The cached principal under `slot`, else the one `read` finds, cached unless a change came meanwhile. */
  private async cachedPrincipalOf(slot: string, read: () => Promise<repo.KeyOwner | undefined>): Promise<Principal | undefined> {
    const now = Date.now();
    const cached = this.cache.get(slot);
    if (cached && cached.expiresAt > now) return cached.principal;

    const changes = this.changes;
    const owner = await read();
    if (!owner) {
      this.cache.delete(slot);
      return undefined;
    }
    const principal = await this.principalOf(owner, now);
    if (this.cacheTtlMs > 0 && this.changes === changes) this.cache.set(slot, { principal, expiresAt: now + this.cacheTtlMs });
    return principal;
  }

  private async principalOf(owner: repo.KeyOwner, now: number): Promise<Principal> {
    if (!owner.lastUsedAt || now - owner.lastUsedAt.getTime() >= TOUCH_INTERVAL_MS) {
      await repo.touchApiKey(this.db, { keyId: owner.keyId, at: new Date(now) });
    }
    const entities = new Set(await repo.listMemberEntities(this.db, { userId: owner.userId }));
    entities.add(owner.entity);
    return {
      keyId: owner.keyId,
      keyKind: owner.keyKind,
      userId: owner.userId,
      username: owner.username,
      isAdmin: owner.isAdmin,
      entity: owner.entity,
      entities,
    };
  }

  /**
   * A web UI session for an authenticated user key; returns the cookie's token (only its hash is stored).
   */
  async createSession(principal: Principal): Promise<string> {
    const now = Date.now();
    await sessions.deleteExpiredSessions(this.db, { now: new Date(now) });
    const token = randomBytes(32).toString('base64url');
    await sessions.insertSession(this.db, { tokenHash: hashApiKey(token), keyId: principal.keyId, expiresAt: new Date(now + SESSION_IDLE_MS) });
    return token;
  }

  /**
   * The principal of a session token. Not cached: a session ends the moment its key is revoked, in every
   * process. Use slides the idle end forward, up to the absolute end.
   */
  async authenticateSession(token: string): Promise<Principal | undefined> {
    const tokenHash = hashApiKey(token);
    const now = Date.now();
    const owner = await sessions.findSessionOwner(this.db, { tokenHash, now: new Date(now) });
    if (!owner) return undefined;
    const slid = Math.min(now + SESSION_IDLE_MS, owner.createdAt.getTime() + SESSION_MAX_MS);
    if (slid - owner.expiresAt.getTime() >= TOUCH_INTERVAL_MS) {
      await sessions.extendSession(this.db, { tokenHash, expiresAt: new Date(slid) });
    }
    return this.principalOf(owner, now);
  }

  async endSession(token: string): Promise<void> {
    await sessions.deleteSession(this.db, { tokenHash: hashApiKey(token) });
  }

  /**
   * On an empty database: create user `admin` with a key, write the key to DATA_DIR/admin-api-key (0600)
   * and return it so the caller can print it once. Returns undefined when any user exists, or when
   * another process sharing the database created `admin` first.
   *
   * The user, the key and the file come as one: the file is written before the transaction that creates
   * the user and the key commits, so a crash (a SIGKILL, a failed commit) at any point leaves either a
   * file and no user (the next start bootstraps again and overwrites the file) or both. Committing first
   * would let a crash leave an admin whose key nobody has, and the next start, seeing a user, would
   * print nothing.
   */
  async bootstrapAdmin(dataDir: string): Promise<{ key: string; file: string } | undefined> {
    if ((await repo.countUsers(this.db)) > 0) return undefined;
    const file = path.join(dataDir, 'admin-api-key');
    const key = await this.db.transaction().execute(async (trx) => {
      // A second process sharing the database waits here until the first commits, then finds the name taken.
      const userId = await insertUserWithEntity(trx, { username: 'admin', isAdmin: true });
      if (!userId) return undefined;
      const created = await insertKey(trx, { userId, name: 'bootstrap admin key', kind: 'user' });
      writeSecretFile(file, `${created.key}\n`);
      return created.key;
    });
    return key === undefined ? undefined : { key, file };
  }
}

/** A user and the user's own entity, of which the user is an admin; undefined when the name is taken. */
async function insertUserWithEntity(trx: Transaction<Database>, args: { username: string; isAdmin: boolean }): Promise<string | undefined> {
  const entityId = randomUUID();
  const userId = randomUUID();
  if (!(await repo.insertEntity(trx, { id: entityId, name: args.username, kind: 'user' }))) return undefined;
  if (!(await repo.insertUser(trx, { id: userId, username: args.username, entityId, isAdmin: args.isAdmin }))) return undefined;
  await repo.upsertMembership(trx, { entityId, userId, role: 'admin' });
  return userId;
}

/** A new key for a user: its secret (never stored) and its id. */
async function insertKey(db: repo.Executor, args: { userId: string; name: string; kind: KeyKind }): Promise<{ key: string; id: string }> {
  const key = generateApiKey();
  const id = randomUUID();
  await repo.insertApiKey(db, { id, userId: args.userId, name: args.name, kind: args.kind, prefix: displayPrefix(key), keyHash: hashApiKey(key) });
  return { key, id };
}

/**
 * Replaces `file` with `text`, readable by its owner only, whole or not at all: written to a temporary
 * file in the same directory, flushed, then renamed over it (a crash leaves the old file or the new one).
 */
function writeSecretFile(file: string, text: string): void {
  const dir = path.dirname(file);
  fs.mkdirSync(dir, { recursive: true });
  const temp = `${file}.tmp`;
  try {
    const fd = fs.openSync(temp, 'w', 0o600);
    try {
      fs.fchmodSync(fd, 0o600); // the mode of open() applies only to a file it creates, and after the umask
      fs.writeFileSync(fd, text);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(temp, file);
  } catch (error) {
    fs.rmSync(temp, { force: true }); // a part of the key, say when the disk is full
    throw error;
  }
  // The rename itself survives a power loss only once the directory is flushed (not possible on Windows).
  try {
    const dirFd = fs.openSync(dir, 'r');
    try {
      fs.fsyncSync(dirFd);
    } finally {
      fs.closeSync(dirFd);
    }
  } catch {
    // best effort
  }
}
