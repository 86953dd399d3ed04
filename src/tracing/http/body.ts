import { errorCodes, type FastifyInstance, type FastifyRequest } from 'fastify';
import { isLosslessNumber } from 'lossless-json';
import { decodeJsonText } from '../../http/body-encoding.js';
import { parseJsonBody } from '../../http/json-body.js';
import { restoreHeld } from '../../http/exact-numbers.js';
import { parseExactNumbers, type HeldNumber } from '../exact-numbers.js';
import { parseLossless, type JsonValue, type LosslessJson } from '../json.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Parse this route's JSON body losslessly as well: the routes whose values are digested need `1.0`
     * and `1` kept apart (reference §3.2). The handler reads the lossless tree with `losslessBody()`.
     */
    losslessBody?: boolean;
    /**
     * Keep the numbers a double would change in this route's payloads (of calls and feedback) and
     * query literals (tracing/exact-numbers.ts): the schemas check the nearest double, and the handler
     * gets the exact values back in `request.body`.
     */
    exactNumbers?: boolean;
  }
  interface FastifyRequest {
    tracingLosslessBody?: LosslessJson;
    tracingHeldNumbers?: HeldNumber[];
  }
}

/** The lossless parse of the body, for routes with `config.losslessBody`. */
export function losslessBody(request: FastifyRequest): LosslessJson {
  return request.tracingLosslessBody ?? null;
}

/** Lossless values as plain JSON for schema validation; keys such as `__proto__` stay plain own data. */
export function losslessToPlain(value: LosslessJson): JsonValue {
  if (isLosslessNumber(value)) return Number(value.value);
  if (Array.isArray(value)) return value.map(losslessToPlain);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, JsonValue> = {};
    for (const key of Object.keys(value)) {
      Object.defineProperty(out, key, { value: losslessToPlain(value[key]), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}

/**
 * The tracing API's JSON parser (encapsulated in the tracing plugin). Most routes use the app's parser;
 * digest routes also keep the lossless tree. `application/jsonl` bodies are accepted as JSON, as some
 * clients send the streaming content type on requests too. A body with no `Content-Type` at all is read
 * as JSON too: weave's Python HTTP binding up to 0.52 (and 0.53's legacy binding) posts `data=<json>`
 * without the header, and weave's FastAPI server reads such bodies as JSON. Any other content type
 * keeps the app's 415.
 */
export function registerTracingBodyParsers(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  const parser = (request: FastifyRequest, body: Buffer, done: (err: Error | null, body?: unknown) => void) => {
    try {
      // UTF-8 only, its byte order mark dropped (the lossless parser would refuse it), else a 400 or 415.
      const text = decodeJsonText(request, body, 'bad_request');
      const config = request.routeOptions.config;
      if (config.exactNumbers) {
        const { value, held } = parseExactNumbers(text);
        if (held.length > 0) request.tracingHeldNumbers = held;
        done(null, value);
        return;
      }
      if (!config.losslessBody || text.trim() === '') {
        done(null, parseJsonBody(text));
        return;
      }
      const tree = parseLossless(text);
      request.tracingLosslessBody = tree;
      done(null, losslessToPlain(tree));
    } catch (error) {
      done(error as Error, undefined);
    }
  };
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, parser);
  app.addContentTypeParser('application/jsonl', { parseAs: 'buffer' }, parser);
  // Fastify hands a body without the header to the catch-all parser (and so is every unknown type).
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body, done) => {
    if (request.headers['content-type'] === undefined) parser(request, body as Buffer, done);
    else done(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(), undefined);
  });
  // After validation, which saw the nearest doubles, the payloads get their exact numbers back.
  app.addHook('preHandler', (request, _reply, done) => {
    if (request.tracingHeldNumbers) restoreHeld(request.body, request.tracingHeldNumbers);
    done();
  });
}
