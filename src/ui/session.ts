import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { checkCsrf, principalOf, readSessionCookie, SECURE_SESSION_COOKIE, SESSION_COOKIE } from '../auth/plugin.js';
import type { Principal } from '../auth/principal.js';
import { SESSION_MAX_MS } from '../auth/service.js';
import { allPassed } from '../health/checks.js';
import { SystemCheckResponse } from '../health/routes.js';
import { ForbiddenError, UnauthorizedError } from '../errors.js';
import { listProjects } from './projects.js';

const Whoami = z.object({
  username: z.string(),
  entity: z.string().describe('The user\'s own entity.'),
  entities: z.array(z.string()).describe('Every entity whose projects the key reaches.'),
  is_admin: z.boolean(),
});

function whoami(principal: Principal): z.infer<typeof Whoami> {
  return { username: principal.username, entity: principal.entity, entities: [...principal.entities].sort(), is_admin: principal.isAdmin };
}

/**
 * The most a sign-in (or sign-out) body may hold: `{"api_key": ...}` with a key of at most 200 characters
 * is a few hundred bytes. These routes need no key, so without a limit of their own an anonymous client
 * could make the server read and parse BODY_LIMIT_MB of JSON; past this it gets the app's 413.
 */
const SESSION_BODY_LIMIT_BYTES = 4 * 1024;

/**
 * The session cookie's Set-Cookie value: `__Host-ty_session` with Secure over TLS, `ty_session` otherwise
 * (src/auth/plugin.ts). An empty token with max-age 0 clears it.
 */
function sessionCookie(secure: boolean, token: string, maxAgeSeconds: number): string {
  const attributes = `Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}`;
  return secure ? `${SECURE_SESSION_COOKIE}=${token}; ${attributes}; Secure` : `${SESSION_COOKIE}=${token}; ${attributes}`;
}

/**
 * The CSRF check of the session routes, as an onRequest hook: it runs before the body is read, so a
 * cross-site (or header-less) request is refused without reading or parsing anything it sent.
 */
async function csrfBeforeBody(request: FastifyRequest): Promise<void> {
  checkCsrf(request);
}

/**
 * The web UI's session (an API key exchanged for an HttpOnly cookie; the auth hook reads it), the
 * project list it starts from, and the system check as the admin page reads it. Errors are the training
 * form `{"detail": ...}`.
 */
export const sessionRoutes: FastifyPluginAsyncZod = async (app) => {
  const tags = ['ui'];
  // Over https, or always with UI_COOKIE_SECURE=true when TLS ends at a proxy.
  const secureCookies = (request: FastifyRequest) => app.config.uiCookieSecure || request.protocol === 'https';

  app.post(
    '/ui/api/session',
    {
      config: { auth: 'none' },
      bodyLimit: SESSION_BODY_LIMIT_BYTES,
      // A cross-site form must not sign a browser in to someone else's key; checked before the body is read.
      onRequest: csrfBeforeBody,
      schema: {
        tags,
        summary: 'Sign in to the web UI',
        description:
          'Exchanges a user API key for a session cookie (`ty_session`, or `__Host-ty_session` with Secure over TLS or with UI_COOKIE_SECURE: HttpOnly, SameSite=Strict). Needs the header `x-trainyard-ui: 1`, and an Origin, when sent, of this server. Worker keys are refused.',
        body: z.object({ api_key: z.string().min(1).max(200) }),
        response: { 200: Whoami },
      },
    },
    async (request, reply) => {
      const principal = await app.auth.authenticate(request.body.api_key);
      if (!principal) throw new UnauthorizedError('Invalid or revoked API key.');
      if (principal.keyKind !== 'user') throw new ForbiddenError('Worker keys cannot sign in to the web UI: use a user key.');
      const token = await app.auth.createSession(principal);
      reply.header('set-cookie', sessionCookie(secureCookies(request), token, SESSION_MAX_MS / 1000));
      return whoami(principal);
    },
  );

  app.get(
    '/ui/api/session',
    { schema: { tags, summary: 'Who the session (or key) is', response: { 200: Whoami } } },
    async (request) => whoami(principalOf(request)),
  );

  app.delete(
    '/ui/api/session',
    {
      // No live session needed: a browser whose session already ended (expired, key revoked, signed out
      // in another tab) must still be able to drop the dead cookie. The CSRF check stays (onRequest, below).
      config: { auth: 'none' },
      // Sign-out takes no body; one sent anyway is not read past this.
      bodyLimit: SESSION_BODY_LIMIT_BYTES,
      // A cross-site page must not sign the browser out: checked before any body is read. With a bearer
      // key (never sent by a browser on its own) there is no cookie to protect.
      onRequest: async (request) => {
        if (!request.headers.authorization) checkCsrf(request);
      },
      schema: {
        tags,
        summary: 'Sign out of the web UI',
        description: 'Ends the session of the cookie and clears it. With a bearer key there is nothing to end.',
        response: { 204: z.null() },
      },
    },
    async (request, reply) => {
      const token = request.headers.authorization ? undefined : readSessionCookie(request);
      if (token) await app.auth.endSession(token);
      // Both names are cleared: a browser may hold the bare one from before TLS was put in front.
      const cleared = [sessionCookie(false, '', 0)];
      if (secureCookies(request)) cleared.push(sessionCookie(true, '', 0));
      reply.header('set-cookie', cleared);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/ui/api/system-check',
    {
      schema: {
        tags,
        summary: 'The system check, for the admin page',
        description:
          "`/v1/system-check`'s checks, answered 200 with `healthy` false when one fails: a failing check is what the page shows, not a failed request (which a browser logs as an error).",
        response: { 200: z.object({ healthy: z.boolean(), checks: SystemCheckResponse }) },
      },
    },
    async () => {
      const checks = await app.systemChecks.run();
      return { healthy: allPassed(checks), checks: checks as z.infer<typeof SystemCheckResponse> };
    },
  );

  app.get(
    '/v1/projects',
    {
      schema: {
        tags: ['training'],
        summary: 'List Projects',
        description:
          'The projects the key reaches that hold models, trace calls or usage, by entity and name (at most 1000), with their live model counts.',
        response: {
          200: z.object({
            object: z.literal('list'),
            data: z.array(z.object({ id: z.string(), entity: z.string(), project: z.string(), models: z.number().int() })),
          }),
        },
      },
    },
    async (request) => ({ object: 'list' as const, data: await listProjects(app.db, principalOf(request)) }),
  );
};
