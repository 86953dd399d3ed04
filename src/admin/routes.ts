import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiKeyRecord, TeamRecord, UserRecord } from '../auth/service.js';

/** User, team and key management, and backups, for admins; the CLI calls these while a server holds the database. */

const Name = z.string().min(1).max(64);

const User = z.object({ id: z.string(), username: z.string(), entity: z.string(), is_admin: z.boolean(), created_at: z.string() });
const ApiKey = z.object({
  id: z.string(),
  name: z.string(),
  kind: z.enum(['user', 'worker']),
  prefix: z.string().describe('The first characters of the key, to tell keys apart.'),
  username: z.string(),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
});
const CreatedKey = ApiKey.extend({ key: z.string().describe('The secret key. Shown only in this response.') });
const Backup = z.object({
  path: z.string().describe("The backup's directory on the server: `npm run cli -- restore <path>` puts it back, the server stopped."),
  bytes: z.number().int().describe('Bytes of its files; adapter files hard-linked rather than copied count too.'),
  held_ms: z.number().int().describe('How long the database was held for the copy: requests that needed it waited.'),
  created_at: z.string(),
  adapters: z.number().int().describe("Imported adapters (ADAPTERS_DIR) saved with it: those of the copy's checkpoints."),
  pruned: z.array(z.string()).describe("Directories deleted after it: this database's backups past BACKUP_KEEP, and its copies cut short."),
});
const BackupList = z.object({
  unavailable: z.string().nullable().describe('Why this server takes no backups of its own (a PostgreSQL server, or a database in memory); null when it does.'),
  backup_dir: z.string().describe('BACKUP_DIR.'),
  keep: z.number().int().describe('BACKUP_KEEP: how many of its backups a backup keeps; 0, all.'),
  interval_hours: z.number().int().describe('BACKUP_INTERVAL_HOURS: 0, only when asked.'),
  next_due: z.string().nullable().describe('When the next scheduled backup is due; null without a schedule.'),
  data: z
    .array(z.object({ path: z.string(), created_at: z.string(), bytes: z.number().int(), adapters: z.number().int() }))
    .describe("This database's whole backups from this DATA_DIR, newest first."),
  has_more: z.boolean(),
  cut_short: z.array(z.string()).describe('Its copies cut short (a process killed during one); the next backup deletes them.'),
});

export const CreateUserBody = z.object({ username: Name, is_admin: z.boolean().default(false) });
export const CreateKeyBody = z.object({
  username: Name,
  name: z.string().min(1).max(200).optional(),
  kind: z.enum(['user', 'worker']).default('user'),
});
export const CreateTeamBody = z.object({ name: Name });
export const TeamParams = z.object({ team: Name });
export const AddMemberBody = z.object({ username: Name, role: z.enum(['admin', 'member']).default('member') });
export const MemberParams = z.object({ team: Name, username: Name });
export const ListKeysQuery = z.object({ username: Name.optional() });
export const RevokeKeyParams = z.object({ key_id: z.uuid() });

export function userJson(user: UserRecord): z.infer<typeof User> {
  return { id: user.id, username: user.username, entity: user.entity, is_admin: user.isAdmin, created_at: user.createdAt.toISOString() };
}

export function teamJson(team: TeamRecord) {
  return { ...team, created_at: team.created_at.toISOString() };
}

export function keyJson(key: ApiKeyRecord): z.infer<typeof ApiKey> {
  return {
    id: key.id,
    name: key.name,
    kind: key.kind,
    prefix: key.prefix,
    username: key.username,
    created_at: key.createdAt.toISOString(),
    last_used_at: key.lastUsedAt?.toISOString() ?? null,
    revoked_at: key.revokedAt?.toISOString() ?? null,
  };
}

export const adminRoutes: FastifyPluginAsyncZod = async (app) => {
  const config = { auth: 'admin' as const };
  const tags = ['admin'];

  app.post(
    '/users',
    {
      config,
      schema: {
        tags,
        summary: 'Create a user (and the user\'s own entity)',
        body: CreateUserBody,
        response: { 201: User },
      },
    },
    async (request, reply) => {
      const user = await app.auth.createUser({ username: request.body.username, isAdmin: request.body.is_admin });
      return reply.status(201).send(userJson(user));
    },
  );

  app.post(
    '/backups',
    {
      config,
      schema: {
        tags,
        summary: 'Back up the embedded database while the server runs',
        description:
          'Copies the embedded database into a new directory under BACKUP_DIR, consistent: the database is checkpointed and held for the copy, so requests that need it wait that long (the system check reports `database_held_by_backup_since` instead of waiting). One backup at a time; a second starts after the first. The imported adapters (ADAPTERS_DIR) of the checkpoints in the copy are saved with it, hard-linked where the file system allows. Then, with BACKUP_KEEP, the older backups of this database past that many are deleted, as are its copies cut short. 409 on a PostgreSQL server (back it up with its own tools) or an in-memory database.',
        response: { 201: Backup },
      },
    },
    async (_request, reply) => reply.status(201).send(await app.backups.take()),
  );

  app.get(
    '/backups',
    {
      config,
      schema: {
        tags,
        summary: "List the embedded database's backups",
        description:
          "The backups this database made from this DATA_DIR in BACKUP_DIR (those `npm run cli -- restore` takes), newest first, with the settings that govern them and when the next scheduled one is due. On a PostgreSQL server or an in-memory database the list is empty and `unavailable` says why.",
        querystring: z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }),
        response: { 200: BackupList },
      },
    },
    async (request) => app.backups.list(request.query.limit),
  );

  app.get('/users', { config, schema: { tags, summary: 'List users', response: { 200: z.object({ data: z.array(User) }) } } }, async () => ({
    data: (await app.auth.listUsers()).map(userJson),
  }));

  app.get(
    '/teams',
    {
      config,
      schema: {
        tags,
        summary: 'List teams',
        description: 'Every team with its members and their roles, oldest team first.',
        response: {
          200: z.object({
            data: z.array(
              z.object({
                id: z.string(),
                name: z.string(),
                created_at: z.string(),
                members: z.array(z.object({ username: z.string(), role: z.enum(['admin', 'member']) })),
              }),
            ),
          }),
        },
      },
    },
    async () => ({ data: (await app.auth.listTeams()).map(teamJson) }),
  );

  app.post(
    '/teams',
    {
      config,
      schema: { tags, summary: 'Create a team entity', body: CreateTeamBody, response: { 201: z.object({ id: z.string(), name: z.string() }) } },
    },
    async (request, reply) => reply.status(201).send(await app.auth.createTeam({ name: request.body.name })),
  );

  app.post(
    '/teams/:team/members',
    {
      config,
      schema: {
        tags,
        summary: 'Add a user to a team (or change the role)',
        params: TeamParams,
        body: AddMemberBody,
        response: { 200: z.object({ team: z.string(), username: z.string(), role: z.enum(['admin', 'member']) }) },
      },
    },
    async (request) => {
      const { team } = request.params;
      const { username, role } = request.body;
      await app.auth.addMember({ team, username, role });
      return { team, username, role };
    },
  );

  app.delete(
    '/teams/:team/members/:username',
    {
      config,
      schema: {
        tags,
        summary: 'Remove a user from a team',
        description: "The user's keys, and the workers running with them, stop reaching the team's projects and jobs (at once in this process, within AUTH_CACHE_TTL_MS in others).",
        params: MemberParams,
        response: { 200: z.object({ team: z.string(), username: z.string(), removed: z.literal(true) }) },
      },
    },
    async (request) => {
      const { team, username } = request.params;
      await app.auth.removeMember({ team, username });
      return { team, username, removed: true as const };
    },
  );

  app.post(
    '/keys',
    {
      config,
      schema: {
        tags,
        summary: 'Create an API key for a user',
        body: CreateKeyBody,
        response: { 201: CreatedKey },
      },
    },
    async (request, reply) => {
      const { key, record } = await app.auth.createKey(request.body);
      return reply.status(201).send({ ...keyJson(record), key });
    },
  );

  app.get(
    '/keys',
    {
      config,
      schema: {
        tags,
        summary: 'List API keys (never the secrets)',
        querystring: ListKeysQuery,
        response: { 200: z.object({ data: z.array(ApiKey) }) },
      },
    },
    async (request) => ({ data: (await app.auth.listKeys({ username: request.query.username })).map(keyJson) }),
  );

  app.post(
    '/keys/:key_id/revoke',
    {
      config,
      schema: {
        tags,
        summary: 'Revoke an API key',
        description:
          "The key stops working at once in this process, within AUTH_CACHE_TTL_MS in others. 409 when it is the last active user key of any admin: with none left, nobody could manage the server (every admin call would be 401). Create another admin key first, then revoke this one. Worker keys do not count.",
        params: RevokeKeyParams,
        response: { 200: z.object({ id: z.string(), revoked: z.literal(true) }) },
      },
    },
    async (request) => {
      await app.auth.revokeKey({ keyId: request.params.key_id });
      return { id: request.params.key_id, revoked: true as const };
    },
  );
};
