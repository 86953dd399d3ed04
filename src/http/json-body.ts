import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';
import { RequestValidationError } from './validation.js';

/**
 * JSON bodies parsed the way FastAPI reports them: invalid JSON is a 422 `json_invalid` detail with the
 * character position, an empty body is an absent body (the schema then reports it missing).
 * `__proto__` and `constructor.prototype` keys are dropped rather than trusted.
 */
export function parseJsonBody(text: string): unknown {
  if (text.trim() === '') return undefined;
  try {
    return secureJson.parse(text, undefined, { protoAction: 'remove', constructorAction: 'remove' });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const position = Number(/position (\d+)/.exec(message)?.[1] ?? text.length);
    throw new RequestValidationError([
      { type: 'json_invalid', loc: ['body', position], msg: 'JSON decode error', input: {}, ctx: { error: message } },
    ]);
  }
}

export function registerJsonBodyParser(app: FastifyInstance): void {
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
