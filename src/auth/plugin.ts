import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ForbiddenError, UnauthorizedError } from '../errors.js';
import type { Principal } from './principal.js';
import type { AuthService } from './service.js';

/**
 * Who may call a route, set per route as `config: { auth }`:
 *   none   no key needed (health, docs, metrics)
 *   user   a user key (the default)
 *   admin  a user key of an admin
 *   worker a trainer-worker key; worker keys may call nothing else
 */
export type RouteAuth = 'none' | 'user' | 'admin' | 'worker';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: RouteAuth;
  }
  interface FastifyRequest {
    principal: Principal | null;
  }
}

/**
 * The key from `Authorization: Bearer <key>`, or from `Authorization: Basic base64("api:<key>")` as the
 * weave SDKs send it (any user name is accepted; the password is the key).
 */
export function extractApiKey(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (!header) return undefined;
  const space = header.indexOf(' ');
  if (space < 0) return undefined;
  const scheme = header.slice(0, space).toLowerCase();
  const value = header.slice(space + 1).trim();
  if (scheme === 'bearer') return value || undefined;
  if (scheme === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    return colon >= 0 ? decoded.slice(colon + 1) || undefined : undefined;
  }
  return undefined;
}

/** The caller of a route that requires a key (the hook has already rejected requests without one). */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new UnauthorizedError('Missing API key.');
  return request.principal;
}

/**
 * The web UI's session cookie (src/ui/session.ts sets it). Over TLS it carries the `__Host-` prefix, which
 * browsers accept only from this very host with Secure and Path=/: a sibling subdomain cannot plant one.
 * Plain http (a server on a private network) keeps the bare name, which browsers would refuse otherwise.
 */
export const SESSION_COOKIE = 'ty_session';
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;
/** Cookie-authenticated writes must carry this header: a cross-site form or fetch cannot send it without CORS, which trainyard never allows. */
export const CSRF_HEADER = 'x-trainyard-ui';
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** One cookie's value from the Cookie header, or undefined. */
function readCookie(request: FastifyRequest, name: string): string | undefined {
  const header = request.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim() || undefined;
  }
  return undefined;
}

/** The session token a browser sent: the `__Host-` cookie first, as it alone cannot have been planted. */
export function readSessionCookie(request: FastifyRequest): string | undefined {
  return readCookie(request, SECURE_SESSION_COOKIE) ?? readCookie(request, SESSION_COOKIE);
}

function originHost(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined; // "null" (sandboxed frames, file:) and garbage match no host
  }
}

/**
 * CSRF defence for requests a browser authenticates by cookie: unsafe methods need the custom header,
 * and an Origin, when sent, must be this server's own.
 */
export function checkCsrf(request: FastifyRequest): void {
  if (SAFE_METHODS.has(request.method)) return;
  if (request.headers[CSRF_HEADER] !== '1') {
    throw new ForbiddenError(`Cookie-authenticated writes need the header "${CSRF_HEADER}: 1" (sent by the web UI).`);
  }
  // Host only, not scheme: behind a proxy that ends TLS the browser's origin is https while this
  // process sees http.
  const origin = request.headers.origin;
  if (origin !== undefined && originHost(origin) !== request.host) {
    throw new ForbiddenError(`Cross-origin request refused: Origin ${JSON.stringify(origin)} is not this server.`);
  }
}

export function registerAuth(app: FastifyInstance, auth: AuthService): void {
  app.decorateRequest('principal', null);
  // onRequest, before the body is read: an unauthenticated client cannot make us parse 64 MB. A
  // callback hook: a key in the auth cache (nearly every request) is admitted without a promise.
  app.addHook('onRequest', (request, reply, done) => {
    if (request.is404) return done(); // unknown routes answer 404 whoever asks
    const required = request.routeOptions.config.auth ?? 'user';
    if (required === 'none') return done();
    let key: string | undefined;
    let session: string | undefined;
    try {
      key = extractApiKey(request);
      // The web UI's session cookie stands in for a key when no Authorization header is sent; never on
      // the worker protocol.
      session = key === undefined && required !== 'worker' ? readSessionCookie(request) : undefined;
      if (!key && !session) {
        reply.header('www-authenticate', 'Bearer');
        throw new UnauthorizedError(
          'Missing API key. Send it as "Authorization: Bearer <key>" (or HTTP Basic with the key as the password).',
        );
      }
      if (session) checkCsrf(request);
      const cached = key ? auth.cachedPrincipal(key) : undefined;
      if (cached) {
        admit(request, required, cached);
        return done();
      }
    } catch (error) {
      return done(error as Error);
    }
    (key ? auth.authenticate(key) : auth.authenticateSession(session!)).then((principal) => {
      try {
        if (!principal && session) throw new UnauthorizedError('Your session has ended (signed out, expired or its API key was revoked): sign in again.');
        if (!principal) {
          reply.header('www-authenticate', 'Bearer');
          throw new UnauthorizedError('Invalid or revoked API key.');
        }
        admit(request, required, principal);
      } catch (error) {
        return done(error as Error);
      }
      done();
    }, done);
  });
}

/** Lets a known principal through to a route that requires `required`, or throws why not. */
function admit(request: FastifyRequest, required: RouteAuth, principal: Principal): void {
  if (required === 'worker' && principal.keyKind !== 'worker') {
    throw new ForbiddenError('This route is for trainer workers: call it with a worker key (npm run cli -- keys create USER --kind worker).');
  }
  if (required !== 'worker' && principal.keyKind === 'worker') {
    throw new ForbiddenError('Worker keys may only call /v1/workers/*.');
  }
  if (required === 'admin' && !principal.isAdmin) {
    throw new ForbiddenError('This route needs an admin key.');
  }
  request.principal = principal;
}
