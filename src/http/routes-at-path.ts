import type { FastifyInstance, HTTPMethods } from 'fastify';

/**
 * The router's limit on a path parameter (Fastify's default is 100 characters, answered 414). Weave object
 * ids reach 128 characters, and a percent-encoded character can take 12: route schemas bound the decoded
 * value.
 */
export const MAX_PARAM_LENGTH = 4096;

function decodes(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The methods the app's routes serve at a concrete path, asking the router once per method it supports:
 * `/v1/health` gives GET and HEAD, `/v1/models/a/b` those of `/v1/models/*`. A path the router cannot
 * read gives none, checked first because the router answers such a lookup with a handler for its own
 * error rather than none: one that does not start with "/", holds malformed percent-encoding, or has a
 * segment longer than a parameter may be.
 */
export function allowedMethods(app: FastifyInstance, path: string): string[] {
  if (!path.startsWith('/') || !decodes(path) || path.split('/').some((segment) => segment.length > MAX_PARAM_LENGTH)) return [];
  // findRoute answers null at runtime for no match, though its type does not say so.
  return app.supportedMethods.filter((method) => app.findRoute({ method: method as HTTPMethods, url: path }) != null);
}
