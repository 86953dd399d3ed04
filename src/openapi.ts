import os from 'node:os';
import path from 'node:path';
import { buildApp } from './app.js';
import { loadConfig } from './config.js';
import { createPglite, pgliteHandle } from './db/index.js';

export const OPENAPI_PATH = path.join('openapi', 'openapi.json');

/** The OpenAPI document of every route, as committed in openapi/openapi.json. */
export async function generateOpenApi(): Promise<string> {
  const config = loadConfig({ LOG_LEVEL: 'silent', BOOTSTRAP_ADMIN: 'false', DATA_DIR: path.join(os.tmpdir(), 'trainyard-openapi') });
  const app = await buildApp(config, { database: pgliteHandle(await createPglite()) });
  try {
    await app.ready();
    return `${JSON.stringify(app.swagger(), null, 2)}\n`;
  } finally {
    await app.close();
  }
}

/**
 * What is wrong with an OpenAPI document (none: valid): the OpenAPI 3.1 schema check of
 * @seriousme/openapi-schema-validator, and every `$ref` must be a JSON pointer into the document that
 * resolves (the validator accepts some malformed pointers). Only the drift check and tests call it; the
 * validator is a development dependency, so it is imported here rather than at the top.
 */
export async function validateOpenApi(document: string): Promise<string[]> {
  const { Validator } = await import('@seriousme/openapi-schema-validator');
  const parsed = JSON.parse(document) as Record<string, unknown>;
  const result = await new Validator().validate(structuredClone(parsed));
  if (!result.valid) {
    if (typeof result.errors === 'string') return [result.errors];
    return (result.errors ?? []).map((error) => `${error.instancePath || '/'} ${error.message ?? error.keyword}`);
  }
  const problems: string[] = [];
  for (const ref of refs(parsed)) {
    if (resolvePointer(parsed, ref) === undefined) problems.push(`$ref ${ref} does not resolve`);
  }
  return problems;
}

function refs(value: unknown, found = new Set<string>()): Set<string> {
  if (Array.isArray(value)) {
    for (const item of value) refs(item, found);
  } else if (value && typeof value === 'object') {
    for (const [key, child] of Object.entries(value)) {
      if (key === '$ref' && typeof child === 'string') found.add(child);
      else refs(child, found);
    }
  }
  return found;
}

function resolvePointer(document: unknown, ref: string): unknown {
  if (!ref.startsWith('#/') || ref.indexOf('#', 1) !== -1) return undefined;
  let node: unknown = document;
  for (const token of ref.slice(2).split('/')) {
    const key = decodeURIComponent(token).replaceAll('~1', '/').replaceAll('~0', '~');
    if (!node || typeof node !== 'object' || !Object.hasOwn(node, key)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}
