import type { FastifyReply, FastifyRequest } from 'fastify';
import { extractApiKey } from '../../auth/plugin.js';
import type { AuthService } from '../../auth/service.js';
import { ForbiddenError, UnauthorizedError } from '../../errors.js';

/**
 * Authentication for the OTLP routes, which run with `config.auth: 'none'` so that this hook can also
 * take the key from a `wandb-api-key` header (W&B's OTel docs show it beside Basic auth; reference
 * §2.11). Same rules as the app's auth hook: user keys only.
 */
export function otelApiKey(request: FastifyRequest): string | undefined {
  const fromAuthorization = extractApiKey(request);
  if (fromAuthorization) return fromAuthorization;
  const header = request.headers['wandb-api-key'];
  const value = Array.isArray(header) ? header[0] : header;
  return value?.trim() || undefined;
}

export function otelAuthHook(auth: AuthService) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const key = otelApiKey(request);
    if (!key) {
      reply.header('www-authenticate', 'Basic');
      throw new UnauthorizedError('Missing API key. Send it as HTTP Basic auth (user "api", the key as password), "Authorization: Bearer <key>" or a wandb-api-key header.');
    }
    const principal = await auth.authenticate(key);
    if (!principal) {
      reply.header('www-authenticate', 'Basic');
      throw new UnauthorizedError('Invalid or revoked API key.');
    }
    if (principal.keyKind === 'worker') throw new ForbiddenError('Worker keys may only call /v1/workers/*.');
    request.principal = principal;
  };
}
