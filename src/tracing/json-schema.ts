import { Ajv2020 } from 'ajv/dist/2020.js';
import { RE2JS } from 're2js';
import { InvalidRequestError } from '../errors.js';

/**
 * JSON Schema (draft 2020-12, what Python's `jsonschema.validate` uses for a schema without `$schema`)
 * for AnnotationSpec field schemas and the feedback values they check. Schemas come from users: they
 * are bounded in size, never fetch remote `$ref`s, and each check compiles in a fresh validator so
 * that no cache grows with the schemas seen. Their regular expressions (`pattern`, `patternProperties`)
 * run on RE2, in time linear in the text: on JavaScript's backtracking engine a user's `^(a+)+$` and a
 * 30-character value held the event loop, and so every tenant's requests, for half a minute.
 */

export const MAX_SCHEMA_BYTES = 64 * 1024;

/**
 * Ajv's regular expression engine: ECMAScript syntax translated to RE2's, which has no lookaround and no
 * backreferences (a schema using them is not valid here). Ajv keys compiled patterns by `toString()`.
 */
function re2(pattern: string): { test(text: string): boolean; toString(): string } {
  const compiled = RE2JS.compile(RE2JS.translateRegExp(pattern));
  return { test: (text) => compiled.test(text), toString: () => `/${pattern}/` };
}
re2.code = 'RE2JS';

function compile(schema: unknown, where: string) {
  const invalid = (why: string) => new InvalidRequestError(`Invalid ${where}: ${why}`, { code: 'invalid_json_schema' });
  if (JSON.stringify(schema).length > MAX_SCHEMA_BYTES) throw invalid(`a JSON Schema of at most ${MAX_SCHEMA_BYTES} bytes`);
  if (typeof schema !== 'boolean' && (schema === null || typeof schema !== 'object' || Array.isArray(schema))) throw invalid('not a JSON Schema');
  try {
    return new Ajv2020({ strict: false, allErrors: false, validateFormats: false, code: { regExp: re2 } }).compile(schema as object);
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
