import { sql, type Kysely, type Transaction } from 'kysely';
import type { Database } from '../db/schema.js';

export type Executor = Kysely<Database> | Transaction<Database>;

export interface UserRecord {
  id: string;
  username: string;
  entity: string;
  isAdmin: boolean;
  createdAt: Date;
}

export interface ApiKeyRecord {
  id: string;
  name: string;
  kind: 'user' | 'worker';
  prefix: string;
  username: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

export interface KeyOwner {
  keyId: string;
  keyKind: 'user' | 'worker';
  lastUsedAt: Date | null;
  userId: string;
  username: string;
  isAdmin: boolean;
  entity: string;
}

export async function insertEntity(db: Executor, args: { id: string; name: string; kind: 'user' | 'team' }): Promise<boolean> {
  const inserted = await db
    .insertInto('entities')
    .values(args)
    .onConflict((oc) => oc.column('name').doNothing())
    .returning('id')
    .executeTakeFirst();
  return inserted !== undefined;
}

export async function insertUser(db: Executor, args: { id: string; username: string; entityId: string; isAdmin: boolean }): Promise<boolean> {
  const inserted = await db
    .insertInto('users')
    .values({ id: args.id, username: args.username, entity_id: args.entityId, is_admin: args.isAdmin })
    .onConflict((oc) => oc.column('username').doNothing())
    .returning('id')
    .executeTakeFirst();
  return inserted !== undefined;
}

export async function upsertMembership(db: Executor, args: { entityId: string; userId: string; role: 'admin' | 'member' }): Promise<void> {
  await db
    .insertInto('memberships')
    .values({ entity_id: args.entityId, user_id: args.userId, role: args.role })
    .onConflict((oc) => oc.columns(['entity_id', 'user_id']).doUpdateSet({ role: args.role }))
    .execute();
}

/** Removes a user from an entity; false when the user was not a member. */
export async function deleteMembership(db: Executor, args: { entityId: string; userId: string }): Promise<boolean> {
  const deleted = await db.deleteFrom('memberships').where('entity_id', '=', args.entityId).where('user_id', '=', args.userId).returning('user_id').executeTakeFirst();
  return deleted !== undefined;
}

export async function findEntity(db: Executor, args: { name: string }) {
  return db.selectFrom('entities').select(['id', 'name', 'kind']).where('name', '=', args.name).executeTakeFirst();
}

function userQuery(db: Executor) {
  return db
    .selectFrom('users')
    .innerJoin('entities', 'entities.id', 'users.entity_id')
    .select(['users.id', 'users.username', 'entities.name as entity', 'users.is_admin', 'users.created_at']);
}

function toUser(row: { id: string; username: string; entity: string; is_admin: boolean; created_at: Date }): UserRecord {
  return { id: row.id, username: row.username, entity: row.entity, isAdmin: row.is_admin, createdAt: row.created_at };
}

export async function findUser(db: Executor, args: { username: string }): Promise<UserRecord | undefined> {
  const row = await userQuery(db).where('users.username', '=', args.username).executeTakeFirst();
  return row && toUser(row);
}

export async function listUsers(db: Executor): Promise<UserRecord[]> {
  const rows = await userQuery(db).orderBy('users.created_at').orderBy('users.username').execute();
  return rows.map(toUser);
}

export interface TeamRecord {
  id: string;
  name: string;
  created_at: Date;
  members: { username: string; role: 'admin' | 'member' }[];
}

/** Every team with its members (by username), oldest team first. */
export async function listTeams(db: Executor): Promise<TeamRecord[]> {
  const rows = await db
    .selectFrom('entities')
    .leftJoin('memberships', 'memberships.entity_id', 'entities.id')
    .leftJoin('users', 'users.id', 'memberships.user_id')
    .select(['entities.id', 'entities.name', 'entities.created_at', 'users.username', 'memberships.role'])
    .where('entities.kind', '=', 'team')
    .orderBy('entities.created_at')
    .orderBy('entities.name')
    .orderBy('users.username')
    .execute();
  const teams = new Map<string, TeamRecord>();
  for (const row of rows) {
    let team = teams.get(row.id);
    if (!team) teams.set(row.id, (team = { id: row.id, name: row.name, created_at: row.created_at, members: [] }));
    if (row.username !== null && row.role !== null) team.members.push({ username: row.username, role: row.role });
  }
  return [...teams.values()];
}

/** The usernames of these user ids (any text: an id that is no user's is left out). */
export async function usernamesByIds(db: Executor, ids: readonly string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await db.selectFrom('users').select(['id', 'username']).where(sql<boolean>`id::text = any(${ids}::text[])`).execute();
  return new Map(rows.map((row) => [row.id, row.username]));
}

export async function countUsers(db: Executor): Promise<number> {
  const row = await db.selectFrom('users').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function listMemberEntities(db: Executor, args: { userId: string }): Promise<string[]> {
  const rows = await db
    .selectFrom('memberships')
    .innerJoin('entities', 'entities.id', 'memberships.entity_id')
    .select('entities.name')
    .where('memberships.user_id', '=', args.userId)
    .execute();
  return rows.map((r) => r.name);
}

export async function insertApiKey(
  db: Executor,
  args: { id: string; userId: string; name: string; kind: 'user' | 'worker'; prefix: string; keyHash: string },
): Promise<void> {
  await db
    .insertInto('api_keys')
    .values({ id: args.id, user_id: args.userId, name: args.name, kind: args.kind, prefix: args.prefix, key_hash: args.keyHash })
    .execute();
}

/** The columns of a key and its owner, for queries that join api_keys, users and entities. */
export const KEY_OWNER_COLUMNS = [
  'api_keys.id as key_id',
  'api_keys.kind',
  'api_keys.last_used_at',
  'users.id as user_id',
  'users.username',
  'users.is_admin',
  'entities.name as entity',
] as const;

export function toKeyOwner(row: {
  key_id: string;
  kind: 'user' | 'worker';
  last_used_at: Date | null;
  user_id: string;
  username: string;
  is_admin: boolean;
  entity: string;
}): KeyOwner {
  return {
    keyId: row.key_id,
    keyKind: row.kind,
    lastUsedAt: row.last_used_at,
    userId: row.user_id,
    username: row.username,
    isAdmin: row.is_admin,
    entity: row.entity,
  };
}

/** The live (unrevoked) key with this hash, or this id, and its owner. */
export async function findKeyOwner(db: Executor, args: { keyHash: string } | { keyId: string }): Promise<KeyOwner | undefined> {
  const row = await db
    .selectFrom('api_keys')
    .innerJoin('users', 'users.id', 'api_keys.user_id')
    .innerJoin('entities', 'entities.id', 'users.entity_id')
    .select(KEY_OWNER_COLUMNS)
    .where('keyHash' in args ? 'api_keys.key_hash' : 'api_keys.id', '=', 'keyHash' in args ? args.keyHash : args.keyId)
    .where('api_keys.revoked_at', 'is', null)
    .executeTakeFirst();
  return row && toKeyOwner(row);
}

export async function listApiKeys(db: Executor, args: { userId?: string }): Promise<ApiKeyRecord[]> {
  let query = db
    .selectFrom('api_keys')
    .innerJoin('users', 'users.id', 'api_keys.user_id')
    .select([
      'api_keys.id',
      'api_keys.name',
      'api_keys.kind',
      'api_keys.prefix',
      'users.username',
      'api_keys.created_at',
      'api_keys.last_used_at',
      'api_keys.revoked_at',
    ])
    .orderBy('api_keys.created_at')
    .orderBy('api_keys.id');
  if (args.userId) query = query.where('api_keys.user_id', '=', args.userId);
  const rows = await query.execute();
  return rows.map((r) => ({
    id: r.id,
    name: r.name,
    kind: r.kind,
    prefix: r.prefix,
    username: r.username,
    createdAt: r.created_at,
    lastUsedAt: r.last_used_at,
    revokedAt: r.revoked_at,
  }));
}

/**
 * The ids of the live (unrevoked) user keys of admin users, the keys that can manage the server, locked
 * (FOR UPDATE) until the transaction `trx` ends: a second transaction asking for them waits, then sees the
 * first one's revoke. Locked in id order, so that two such transactions cannot deadlock.
 */
export async function lockActiveAdminKeys(trx: Transaction<Database>): Promise<string[]> {
  const rows = await trx
    .selectFrom('api_keys')
    .innerJoin('users', 'users.id', 'api_keys.user_id')
    .select('api_keys.id')
    .where('users.is_admin', '=', true)
    .where('api_keys.kind', '=', 'user')
    .where('api_keys.revoked_at', 'is', null)
    .orderBy('api_keys.id')
    .forUpdate('api_keys')
    .execute();
  return rows.map((r) => r.id);
}

/** Marks the key revoked; returns false when no such key exists. Revoking twice keeps the first time. */
export async function revokeApiKey(db: Executor, args: { keyId: string; at: Date }): Promise<boolean> {
  const row = await db
    .updateTable('api_keys')
    .set((eb) => ({ revoked_at: eb.fn.coalesce('revoked_at', eb.val(args.at)) }))
    .where('id', '=', args.keyId)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

export async function touchApiKey(db: Executor, args: { keyId: string; at: Date }): Promise<void> {
  await db.updateTable('api_keys').set({ last_used_at: args.at }).where('id', '=', args.keyId).execute();
}
