import type { ColumnType, Generated } from 'kysely';

export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;

export interface EntityTable {
  id: string;
  name: string;
  kind: 'user' | 'team';
  created_at: Generated<Date>;
}

export interface UserTable {
  id: string;
  username: string;
  entity_id: string;
  is_admin: Generated<boolean>;
  created_at: Generated<Date>;
}

export interface MembershipTable {
  entity_id: string;
  user_id: string;
  role: 'admin' | 'member';
  created_at: Generated<Date>;
}

export interface ApiKeyTable {
  id: string;
  user_id: string;
  name: string;
  kind: 'user' | 'worker';
  prefix: string;
  key_hash: string;
  created_at: Generated<Date>;
  last_used_at: Timestamp | null;
  revoked_at: Timestamp | null;
}

/** A web UI session (migration 0007): the sha256 of the cookie's token and the key it was exchanged for. */
export interface UiSessionTable {
  token_hash: string;
  api_key_id: string;
  created_at: Generated<Date>;
  expires_at: Timestamp;
}

export interface AuthTables {
  entities: EntityTable;
  users: UserTable;
  memberships: MembershipTable;
  api_keys: ApiKeyTable;
  ui_sessions: UiSessionTable;
}
