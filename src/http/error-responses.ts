import type { FastifyInstance, RouteOptions } from 'fastify';
import { z } from 'zod';
import { ErrorEnvelope, ValidationErrorBody } from '../inference/schemas.js';
import { apiFamily, type ApiFamily } from './error-handler.js';

/**
 * Declares the error answers every route can give, in its API's error form (error-handler.ts), in the
 * OpenAPI document: any 4xx (bad input, authentication, not found, conflicts, body too large, media type)
 * and 503 (the database is unavailable or busy). A route's own declarations of particular statuses stay.
 * Clients, validators and schema-driven fuzzers (test/fuzz) then find every status the server sends
 * documented.
 */
const detailList = ValidationErrorBody.shape.detail;

const ERROR_BODIES: Record<ApiFamily, z.ZodType> = {
  training: z
    .object({ detail: z.union([z.string(), detailList]) })
    .loose()
    .describe('{"detail": "<message>"}, or a validation error\'s {"detail": [...]}'),
  tracing: z
    .union([z.object({ reason: z.string() }).loose(), z.object({ detail: detailList })])
    .describe('{"reason": "<message>"}, or a validation error\'s {"detail": [...]}'),
  inference: z.union([ErrorEnvelope, ValidationErrorBody]).describe('OpenAI\'s {"error": {...}} envelope'),
};
// Named components, referenced from every route rather than repeated in each.
for (const [family, body] of Object.entries(ERROR_BODIES)) {
  z.globalRegistry.add(body, { id: `${family[0].toUpperCase()}${family.slice(1)}Error` });
}

export function documentErrorResponses(app: FastifyInstance): void {
  app.addHook('onRoute', (route: RouteOptions) => {
    const schema = (route.schema ??= {}) as { hide?: boolean; response?: Record<string, unknown> };
    if (schema.hide) return;
    const body = ERROR_BODIES[apiFamily(route.url)];
    const response = (schema.response ??= {});
    response['4XX'] ??= {
      description: 'Refused: bad input, a missing or wrong key, not found, a conflict, a body too large',
      content: { 'application/json': { schema: body } },
    };
    response['503'] ??= {
      description: 'The database is unavailable or busy; try again shortly',
      content: { 'application/json': { schema: body } },
    };
  });
}
