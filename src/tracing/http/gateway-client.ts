import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ChatCompleter } from '../services/completions.js';

/**
 * The inference gateway as the completions service sees it: POST /v1/chat/completions dispatched
 * in-process (Fastify's inject, no socket), as the caller, with `Compat-Project` set to the tracing
 * project. The request therefore takes the gateway's own path: its validation, its router (base models
 * and the caller's trained checkpoints), its tenancy and its usage metering. Streams arrive chunk by
 * chunk (`payloadAsStream`).
 */
export function gatewayFor(app: FastifyInstance, request: FastifyRequest): ChatCompleter {
  const headers = (projectId: string): Record<string, string> => ({
    'content-type': 'application/json',
    authorization: request.headers.authorization ?? '',
    'compat-project': projectId,
    'x-request-id': request.id,
  });
  const parse = (text: string): unknown => {
    try {
      return JSON.parse(text);
    } catch {
      return undefined;
    }
  };
  return {
    async complete({ body, projectId }) {
      const response = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(projectId), payload: JSON.stringify(body) });
      return { status: response.statusCode, json: () => parse(response.body) };
    },
    async stream({ body, projectId }) {
      const response = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(projectId), payload: JSON.stringify(body), payloadAsStream: true });
      const stream = response.stream() as Readable;
      return {
        status: response.statusCode,
        body: stream,
        async json() {
          let text = '';
          for await (const chunk of stream) text += String(chunk);
          return parse(text);
        },
      };
    },
  };
}
