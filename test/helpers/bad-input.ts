import type { InjectOptions } from 'fastify';
import { expect } from 'vitest';
import { z } from 'zod';
import type { App } from '../../src/app.js';
import type { ApiFamily } from '../../src/http/error-handler.js';
import { databaseFingerprint } from './tenants.js';

/**
 * Generates invalid variants of a valid request body from the route's zod schema, sends each, and
 * asserts a 4xx in the API's error form with nothing persisted.
 */

interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
}

export interface BadCase {
  name: string;
  /** A value to send as JSON, or raw text when `raw` is set. */
  body: unknown;
  raw?: boolean;
}

function types(schema: JsonSchema): string[] {
  if (schema.type) return Array.isArray(schema.type) ? schema.type : [schema.type];
  const branches = schema.anyOf ?? schema.oneOf;
  return branches ? branches.flatMap(types) : [];
}

/** A value of a JSON type the schema does not accept, or undefined when it accepts anything. */
function wrongTypeValue(schema: JsonSchema): unknown {
  const accepted = new Set(types(schema));
  if (accepted.size === 0) return undefined;
  const candidates: [string[], unknown][] = [
    [['string'], 12345],
    [['number', 'integer'], 'not a number'],
    [['boolean'], 'not a boolean'],
    [['array'], { not: 'a list' }],
    [['object'], ['not', 'an', 'object']],
  ];
  for (const [kinds, value] of candidates) {
    const valueType = Array.isArray(value) ? 'array' : typeof value === 'object' ? 'object' : typeof value;
    if (kinds.some((k) => accepted.has(k)) && !accepted.has(valueType) && !(valueType === 'number' && accepted.has('integer'))) {
      return value;
    }
  }
  return undefined;
}

function fieldCases(field: string, schema: JsonSchema, valid: unknown): { name: string; value: unknown }[] {
  const cases: { name: string; value: unknown }[] = [];
  const wrong = wrongTypeValue(schema);
  if (wrong !== undefined) cases.push({ name: `${field} has the wrong type`, value: wrong });
  if (schema.enum) cases.push({ name: `${field} is not one of the allowed values`, value: '__not_an_option__' });
  if (schema.const !== undefined) cases.push({ name: `${field} is not the allowed constant`, value: '__not_the_constant__' });
  if (schema.minimum !== undefined) cases.push({ name: `${field} is below its minimum`, value: schema.minimum - 1 });
  if (schema.exclusiveMinimum !== undefined) cases.push({ name: `${field} is at its exclusive minimum`, value: schema.exclusiveMinimum });
  if (schema.maximum !== undefined) cases.push({ name: `${field} is above its maximum`, value: schema.maximum + 1 });
  if (schema.exclusiveMaximum !== undefined) cases.push({ name: `${field} is at its exclusive maximum`, value: schema.exclusiveMaximum });
  if (types(schema).includes('integer') && !types(schema).includes('number')) cases.push({ name: `${field} is fractional`, value: 1.5 });
  if (schema.maxLength !== undefined) cases.push({ name: `${field} is too long`, value: 'x'.repeat(schema.maxLength + 1) });
  if (schema.minLength) cases.push({ name: `${field} is too short`, value: '' });
  if (schema.maxItems !== undefined) {
    const item = Array.isArray(valid) && valid.length ? valid[0] : 'x';
    cases.push({ name: `${field} has too many items`, value: Array.from({ length: schema.maxItems + 1 }, () => item) });
  }
  if (schema.minItems) cases.push({ name: `${field} has too few items`, value: [] });
  return cases;
}

export function badBodies(schema: z.ZodType, valid: Record<string, unknown>): BadCase[] {
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const cases: BadCase[] = [
    { name: 'the body is not valid JSON', body: '{"unterminated": ', raw: true },
    { name: 'the body is empty', body: '', raw: true },
    { name: 'the body is a list', body: [valid] },
    { name: 'the body is a string', body: 'a string' },
    { name: 'the body is null', body: null },
    { name: 'the body is nested 5000 levels deep', body: '['.repeat(5000) + ']'.repeat(5000), raw: true },
  ];
  for (const field of json.required ?? []) {
    const { [field]: _dropped, ...rest } = valid;
    cases.push({ name: `${field} is missing`, body: rest });
  }
  for (const [field, property] of Object.entries(json.properties ?? {})) {
    for (const { name, value } of fieldCases(field, property, valid[field])) cases.push({ name, body: { ...valid, [field]: value } });
  }
  return cases;
}

/** The error form each API answers with, for a 4xx other than 422. */
const FORMS: Record<ApiFamily, (body: Record<string, unknown>) => void> = {
  training: (body) => expect(typeof body.detail).toBe('string'),
  tracing: (body) => expect(typeof body.reason).toBe('string'),
  inference: (body) => expect(body.error).toMatchObject({ message: expect.any(String), type: expect.any(String) }),
};

export async function expectBadInputRejected(
  app: App,
  options: { request: Omit<InjectOptions, 'body' | 'payload'>; schema: z.ZodType; valid: Record<string, unknown>; family: ApiFamily },
): Promise<void> {
  const before = await databaseFingerprint(app);
  for (const bad of badBodies(options.schema, options.valid)) {
    const response = await app.inject({
      ...options.request,
      headers: { 'content-type': 'application/json', ...options.request.headers },
      payload: bad.raw ? (bad.body as string) : JSON.stringify(bad.body),
    });
    expect(response.statusCode, `${bad.name}: ${response.body.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
    expect(response.statusCode, `${bad.name}: ${response.body.slice(0, 300)}`).toBeLessThan(500);
    const body = response.json() as Record<string, unknown>;
    if (response.statusCode === 422) {
      expect(Array.isArray(body.detail), bad.name).toBe(true);
      for (const item of body.detail as Record<string, unknown>[]) {
        expect(item, bad.name).toMatchObject({ type: expect.any(String), loc: expect.any(Array), msg: expect.any(String) });
        expect((item.loc as unknown[])[0], bad.name).toBe('body');
      }
    } else {
      FORMS[options.family](body);
    }
  }
  expect(await databaseFingerprint(app)).toEqual(before);
}
