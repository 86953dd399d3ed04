import type { z } from 'zod';
import type { ApiKeyRecord, AuthService, UserRecord } from '../auth/service.js';
import {
  AddMemberBody,
  CreateKeyBody,
  CreateTeamBody,
  CreateUserBody,
  keyJson,
  ListKeysQuery,
  MemberParams,
  RevokeKeyParams,
  TeamParams,
  teamJson,
  userJson,
} from '../admin/routes.js';
import { AppError, UnprocessableError } from '../errors.js';
import { zodIssuesToDetail, type Location } from '../http/validation.js';

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

/**
 * `data` as the admin route's schema for `location` takes it, or the refusal the server would answer:
 * the same 422 line (`422: name: String should have at most 200 characters`) as through its admin API.
 */
function parse<S extends z.ZodType>(schema: S, location: Location, data: unknown): z.output<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  throw new HttpAdminError(`422: ${detailText(zodIssuesToDetail(result.error.issues, location, data))}`);
}

/** A service's refusal as the line the CLI prints for the same refusal from the server's admin API. */
function asServerWould(error: unknown): unknown {
  if (error instanceof UnprocessableError) return new HttpAdminError(`422: ${detailText([{ loc: error.loc, msg: error.message }])}`, { cause: error });
  if (error instanceof AppError) return new HttpAdminError(`${error.statusCode}: ${error.message}`, { cause: error });
  return error;
}

/**
 * On the database itself (no server holds DATA_DIR): each call's input checked by the admin routes' own
 * schemas, and refused in the same words and with the same exit code as through a running server.
 */
export function directClient(auth: AuthService): AdminClient {
  const users = (list: UserRecord[]) => ({ data: list.map(userJson) });
  const keys = (list: ApiKeyRecord[]) => ({ data: list.map(keyJson) });
  const client: AdminClient = {
    createUser: async (username, isAdmin) => {
      const body = parse(CreateUserBody, 'body', { username, is_admin: isAdmin });
      return userJson(await auth.createUser({ username: body.username, isAdmin: body.is_admin }));
    },
    listUsers: async () => users(await auth.listUsers()),
    createTeam: async (name) => auth.createTeam(parse(CreateTeamBody, 'body', { name })),
    listTeams: async () => ({ data: (await auth.listTeams()).map(teamJson) }),
    addMember: async (team, username, role) => {
      const params = parse(TeamParams, 'path', { team });
      const body = parse(AddMemberBody, 'body', { username, role });
      await auth.addMember({ team: params.team, username: body.username, role: body.role });
      return { team: params.team, username: body.username, role: body.role };
    },
    removeMember: async (team, username) => {
      const params = parse(MemberParams, 'path', { team, username });
      await auth.removeMember(params);
      return { team: params.team, username: params.username, removed: true };
    },
    createKey: async (username, name, kind) => {
      const { key, record } = await auth.createKey(parse(CreateKeyBody, 'body', { username, name, kind }));
      return { ...keyJson(record), key };
    },
    listKeys: async (username) => keys(await auth.listKeys(parse(ListKeysQuery, 'query', { username }))),
    revokeKey: async (keyId) => {
      const { key_id } = parse(RevokeKeyParams, 'path', { key_id: keyId });
      await auth.revokeKey({ keyId: key_id });
      return { id: key_id, revoked: true };
    },
  };
  // Every call, so that the service's own refusals (a taken name, a user not found) read as the server's too.
  const wrapped = {} as Record<string, unknown>;
  for (const [name, call] of Object.entries(client) as [string, (...args: unknown[]) => Promise<unknown>][]) {
    wrapped[name] = async (...args: unknown[]) => {
      try {
        return await call(...args);
      } catch (error) {
        throw asServerWould(error);
      }
    };
  }
  return wrapped as unknown as AdminClient;
}

/**
 * A call to the running server's admin API that failed: no answer came, or its status and detail are the
 * message. The direct client's refusals take the same form (`422: name: ...`, `409: ...`).
 */
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

/**
 * How long the CLI waits for a running server's answer to a users, teams or keys call, each a few rows: a
 * server that accepts the connection and never answers (stopped in a debugger, its event loop stuck) is
 * reported after this, not after fetch's own five minutes. Backups copy the database and keep fetch's wait.
 */
const ADMIN_CALL_TIMEOUT_MS = 30_000;

/** One call to a running server's /v1/admin endpoints: its JSON answer, or an HttpAdminError. */
async function adminCall(baseUrl: string, key: string, method: string, path: string, body?: unknown, timeoutMs?: number): Promise<unknown> {
  let response: Response;
  let payload: { detail?: unknown };
  try {
    response = await fetch(`${baseUrl}/v1/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs),
    });
    payload = (await response.json().catch((error: unknown) => {
      if (error instanceof Error && error.name === 'TimeoutError') throw error;
      return {};
    })) as { detail?: unknown };
  } catch (error) {
    if (error instanceof Error && error.name === 'TimeoutError') {
      throw new HttpAdminError(
        `The trainyard server holding the data directory at ${baseUrl} did not answer within ${timeoutMs! / 1000} s. ` +
          'Check that it is running and not stuck, or set TRAINYARD_URL to the address of the server that holds it.',
        { cause: error },
      );
    }
    throw new HttpAdminError(
      `Could not reach the trainyard server holding the data directory at ${baseUrl} (${connectionFault(error)}). ` +
        'Set TRAINYARD_URL to the address that server listens on (http://host:port).',
      { cause: error },
    );
  }
  if (!response.ok) {
    throw new HttpAdminError(`${response.status}: ${detailText(payload.detail ?? payload)}`);
  }
  return payload;
}

/** Talks to a running server's /v1/admin endpoints (the server holds the embedded database). */
export function httpClient(baseUrl: string, key: string, timeoutMs = ADMIN_CALL_TIMEOUT_MS): AdminClient {
  const call = (method: string, path: string, body?: unknown) => adminCall(baseUrl, key, method, path, body, timeoutMs);
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
