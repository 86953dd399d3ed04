import { z } from 'zod';

/**
 * Shared pieces of the tracing request and response schemas. Request objects are plain `z.object`s:
 * unknown fields are accepted and dropped, as clients of different releases send different shapes
 * (reference §1.2). Optional fields are `nullish`: Python clients send `null` for unset fields.
 */

export const ProjectId = z.string().describe('`entity/project`');

const ISO_DATETIME = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)?$/i;

export const DateTime = z.string().regex(ISO_DATETIME, 'must be an ISO-8601 datetime').describe('ISO-8601 datetime');

export const AnyJson = z.unknown().describe('any JSON value');
/**
 * A JSON object, checked but not copied: call payloads are large and written as they came, so a
 * key-by-key record parse would only cost time (see bench/tracing.ts).
 */
export const JsonObject = z
  .custom<Record<string, unknown>>((value) => value !== null && typeof value === 'object' && !Array.isArray(value), {
    message: 'Input should be a valid dictionary',
  })
  .meta({ type: 'object', additionalProperties: true });

export const SortBy = z.object({ field: z.string(), direction: z.string().describe('asc or desc') });

export const Limit = z.number().int().min(0).nullish();
export const Offset = z.number().int().min(0).nullish();

export const Empty = z.object({}).describe('Empty object');

export const tags = ['tracing'];
