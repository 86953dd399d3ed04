import { KEY_OWNER_COLUMNS, toKeyOwner, type Executor, type KeyOwner } from './repository.js';

/** Web UI sessions (table ui_sessions): a random token in an HttpOnly cookie, stored as its sha256. */

export async function insertSession(db: Executor, args: { tokenHash: string; keyId: string; expiresAt: Date }): Promise<void> {
  await db.insertInto('ui_sessions').values({ token_hash: args.tokenHash, api_key_id: args.keyId, expires_at: args.expiresAt }).execute();
}

/** The session's key and owner, while the session is unexpired and its key unrevoked. */
export async function findSessionOwner(
  db: Executor,
  args: { tokenHash: string; now: Date },
): Promise<(KeyOwner & { createdAt: Date; expiresAt: Date }) | undefined> {
  const row = await db
    .selectFrom('ui_sessions')
    .innerJoin('api_keys', 'api_keys.id', 'ui_sessions.api_key_id')
    .innerJoin('users', 'users.id', 'api_keys.user_id')
    .innerJoin('entities', 'entities.id', 'users.entity_id')
    .select([...KEY_OWNER_COLUMNS, 'ui_sessions.created_at', 'ui_sessions.expires_at'])
    .where('ui_sessions.token_hash', '=', args.tokenHash)
    .where('ui_sessions.expires_at', '>', args.now)
    .where('api_keys.revoked_at', 'is', null)
    .executeTakeFirst();
  return row && { ...toKeyOwner(row), createdAt: row.created_at, expiresAt: row.expires_at };
}

export async function extendSession(db: Executor, args: { tokenHash: string; expiresAt: Date }): Promise<void> {
  await db.updateTable('ui_sessions').set({ expires_at: args.expiresAt }).where('token_hash', '=', args.tokenHash).execute();
}

export async function deleteSession(db: Executor, args: { tokenHash: string }): Promise<void> {
  await db.deleteFrom('ui_sessions').where('token_hash', '=', args.tokenHash).execute();
}

/** Sessions past their end; any process may run this. */
export async function deleteExpiredSessions(db: Executor, args: { now: Date }): Promise<void> {
  await db.deleteFrom('ui_sessions').where('expires_at', '<=', args.now).execute();
}
