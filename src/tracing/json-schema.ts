import { Ajv2020 } from 'ajv/dist/2020.js';
import { InvalidRequestError } from '../errors.js';

/**
 * JSON Schema (draft 2020-12, what Python's `jsonschema.validate` uses for a schema without `$schema`)
 * for AnnotationSpec field schemas and the feedback values they check. Schemas come from users: they
 * are bounded in size, never fetch remote `$ref`s, and each check compiles in a fresh validator so
 * that no cache grows with the schemas seen.
 */

export const MAX_SCHEMA_BYTES = 64 * 1024;

function compile(schema: unknown, where: string) {
  const invalid = (why: string) => new InvalidRequestError(`Invalid ${where}: ${why}`, { code: 'invalid_json_schema' });
  if (JSON.stringify(schema).length > MAX_SCHEMA_BYTES) throw invalid(`a JSON Schema of at most ${MAX_SCHEMA_BYTES} bytes`);
  if (typeof schema !== 'boolean' && (schema === null || typeof schema !== 'object' || Array.isArray(schema))) throw invalid('not a JSON Schema');
  try {
    return new Ajv2020({ strict: false, allErrors: false, validateFormats: false }).compile(schema as object);
  } catch (error) {
    throw invalid(`not a valid JSON Schema (${(error as Error).message})`);
  }
}

/** A 400 unless `schema` is a valid JSON Schema. */
export function checkJsonSchema(schema: unknown, where: string): void {
  compile(schema, where);
}

/** Why `value` does not conform to `schema` (a valid one), or null when it does. */
export function schemaViolation(schema: unknown, value: unknown, where: string): string | null {
  const validate = compile(schema, where);
  if (validate(value)) return null;
  const error = validate.errors?.[0];
  return error ? `${error.instancePath || 'value'} ${error.message ?? 'is invalid'}` : 'does not match';
}
