import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/**
 * A request id that can travel as an HTTP header value (to an engine, and back in ours): printable
 * ASCII without spaces is kept as is, anything else percent-encoded. vLLM takes any string as an id.
 */
export function headerSafeRequestId(id: string): string {
  return /^[\x21-\x7e]{1,1024}$/.test(id) ? id : encodeURIComponent(id).slice(0, 8192);
}

/**
 * The id of a request (logs, the `x-request-id` answer header): the client's `X-Request-Id`, made
 * header-safe as the gateway makes it, so an answer given before any handler runs (401, 422) carries
 * the same id as one the gateway gives; a new UUID when the client sent none.
 */
export function requestId(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && given !== '' ? headerSafeRequestId(given) : randomUUID();
}
