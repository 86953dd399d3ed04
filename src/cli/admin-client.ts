import type { ApiKeyRecord, AuthService, UserRecord } from '../auth/service.js';
import { keyJson, teamJson, userJson } from '../admin/routes.js';

/** What the CLI manages, the same whether it opens the database itself or asks the running server. */
export interface AdminClient {
  createUser(username: string, isAdmin: boolean): Promise<unknown>;
  listUsers(): Promise<unknown>;
  createTeam(name: string): Promise<unknown>;
  listTeams(): Promise<unknown>;
  addMember(team: string, username: string, role: 'admin' | 'member'): Promise<unknown>;
  removeMember(team: string, username: string): Promise<unknown>;
  createKey(username: string, name: string | undefined, kind: 'user' | 'worker'): Promise<unknown>;
  listKeys(username: string | undefined): Promise<unknown>;
  revokeKey(keyId: string): Promise<unknown>;
}

export function directClient(auth: AuthService): AdminClient {
  const users = (list: UserRecord[]) => ({ data: list.map(userJson) });
  const keys = (list: ApiKeyRecord[]) => ({ data: list.map(keyJson) });
  return {
    createUser: async (username, isAdmin) => userJson(await auth.createUser({ username, isAdmin })),
    listUsers: async () => users(await auth.listUsers()),
    createTeam: (name) => auth.createTeam({ name }),
    listTeams: async () => ({ data: (await auth.listTeams()).map(teamJson) }),
    addMember: async (team, username, role) => {
      await auth.addMember({ team, username, role });
      return { team, username, role };
    },
    removeMember: async (team, username) => {
      await auth.removeMember({ team, username });
      return { team, username, removed: true };
    },
    createKey: async (username, name, kind) => {
      const { key, record } = await auth.createKey({ username, name, kind });
      return { ...keyJson(record), key };
    },
    listKeys: async (username) => keys(await auth.listKeys({ username })),
    revokeKey: async (keyId) => {
      await auth.revokeKey({ keyId });
      return { id: keyId, revoked: true };
    },
  };
}

/** A call to the running server's admin API that failed: no answer came, or its status and detail are the message. */
export class HttpAdminError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'HttpAdminError';
  }
}

/**
 * What fetch hides under its bare "fetch failed": `connect ECONNREFUSED 127.0.0.1:8000`, or the code alone
 * (the AggregateError of a name with several addresses has no message).
 */
function connectionFault(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  if (!(cause instanceof Error)) return error instanceof Error ? error.message : String(error);
  return cause.message || (cause as NodeJS.ErrnoException).code || cause.name;
}

/**
 * An error answer's detail as a line: the text, or each validation problem as `where: what`
 * (`key_id: Input should be a valid UUID, ...`), or the JSON of anything else.
 */
function detailText(detail: unknown): string {
  if (typeof detail === 'string') return detail;
  const problems = Array.isArray(detail) ? detail : [];
  const lines = problems.map((d: { loc?: unknown; msg?: unknown }) => (Array.isArray(d.loc) && typeof d.msg === 'string' ? `${d.loc.slice(1).join('.') || d.loc.join('.')}: ${d.msg}` : undefined));
  return lines.length > 0 && lines.every((line) => line !== undefined) ? lines.join('; ') : JSON.stringify(detail);
}

/** One call to a running server's /v1/admin endpoints: its JSON answer, or an HttpAdminError. */
async function adminCall(baseUrl: string, key: string, method: string, path: string, body?: unknown): Promise<unknown> {
  let response: Response;
  try {
    response = await fetch(`${baseUrl}/v1/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new HttpAdminError(
      `Could not reach the trainyard server holding the data directory at ${baseUrl} (${connectionFault(error)}). ` +
        'Set TRAINYARD_URL to the address that server listens on (http://host:port).',
      { cause: error },
    );
  }
  const payload = (await response.json().catch(() => ({}))) as { detail?: unknown };
  if (!response.ok) {
    throw new HttpAdminError(`${response.status}: ${detailText(payload.detail ?? payload)}`);
  }
  return payload;
}

/** Talks to a running server's /v1/admin endpoints (the server holds the embedded database). */
export function httpClient(baseUrl: string, key: string): AdminClient {
  const call = (method: string, path: string, body?: unknown) => adminCall(baseUrl, key, method, path, body);
  const q = (username: string | undefined) => (username ? `?username=${encodeURIComponent(username)}` : '');
  return {
    createUser: (username, isAdmin) => call('POST', '/users', { username, is_admin: isAdmin }),
    listUsers: () => call('GET', '/users'),
    createTeam: (name) => call('POST', '/teams', { name }),
    listTeams: () => call('GET', '/teams'),
    addMember: (team, username, role) => call('POST', `/teams/${encodeURIComponent(team)}/members`, { username, role }),
    removeMember: (team, username) => call('DELETE', `/teams/${encodeURIComponent(team)}/members/${encodeURIComponent(username)}`),
    createKey: (username, name, kind) => call('POST', '/keys', { username, name, kind }),
    listKeys: (username) => call('GET', `/keys${q(username)}`),
    revokeKey: (keyId) => call('POST', `/keys/${encodeURIComponent(keyId)}/revoke`),
  };
}

/** A backup taken by the running server that holds the embedded database (POST /v1/admin/backups). */
export function httpBackup(baseUrl: string, key: string): Promise<unknown> {
  return adminCall(baseUrl, key, 'POST', '/backups');
}
