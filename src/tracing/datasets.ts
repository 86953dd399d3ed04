import type { Kysely } from 'kysely';
import type { Database } from '../db/index.js';
import { ForbiddenError, InvalidRequestError, NotFoundError } from '../errors.js';
import { JsonLinesError, readJsonLines } from '../http/json-lines.js';
import { toPlainJson } from './json.js';
import { parseRef, REF_SCHEME, refProjectId, type WeaveRef } from './refs.js';
import * as files from './repositories/files.js';
import * as objects from './repositories/objects.js';
import * as tables from './repositories/tables.js';
import { deletedError, parseVersionSelector } from './services/objects.js';
import { RefResolver } from './services/refs.js';

/**
 * Training data stored through the tracing API, for SFT jobs (docs/tracing.md, "Training data"):
 *   weave:///<entity>/<project>/object/<name>:<digest|latest|vN>  a dataset object whose `rows` is a table ref
 *   weave:///<entity>/<project>/table/<digest>                    a table
 *   weave:///<entity>/<project>/file/<digest>                     a JSONL file uploaded through /file/create
 * Each resolves to its rows as plain JSON, in order. The entity must be one of `entities` (403).
 */
export async function resolveTrainingRows(db: Kysely<Database>, args: { entities: ReadonlySet<string>; url: string }): Promise<unknown[]> {
  const { url } = args;
  if (!url.startsWith(REF_SCHEME)) {
    throw new InvalidRequestError(`Training data ${JSON.stringify(url)} is not a weave:/// URL (dataset object, table or file).`, { code: 'invalid_ref' });
  }
  const file = /^weave:\/\/\/([^/]+)\/([^/]+)\/file\/([A-Za-z0-9]+)$/.exec(url);
  if (file) {
    const [, entity, project, digest] = file;
    requireEntity(args.entities, entity, `${entity}/${project}`);
    const content = await files.readFileContent(db, { projectId: `${entity}/${project}`, digest });
    if (!content) throw new NotFoundError('file', undefined, { message: `File ${digest} not found in ${entity}/${project}` });
    return fileRows(content, url);
  }

  const ref = parseRef(url);
  const projectId = refProjectId(ref);
  requireEntity(args.entities, ref.entity, projectId);
  const resolver = new RefResolver(db, projectId);
  switch (ref.kind) {
    case 'table':
      if (ref.path.length) throw new InvalidRequestError(`Training data ${url} must name a whole table.`, { code: 'invalid_ref' });
      return tableRows(db, projectId, ref.digest, url);
    case 'object':
    case 'op': {
      const row = await objects.readVersion(db, { projectId, objectId: ref.name, selector: parseVersionSelector(ref.digest) });
      if (!row) throw new NotFoundError('object', undefined, { message: `Obj ${ref.name}:${ref.digest} not found in ${projectId}` });
      if (row.deleted_at) throw deletedError(row);
      const walked = await resolver.walk(row.val, ref.path);
      if (!walked.ok) throw new NotFoundError('object', undefined, { message: `Nothing at ${url}` });
      return rowsOf(db, resolver, walked.value, url);
    }
    case 'call':
      throw new InvalidRequestError(`Training data ${url} is a call ref; name a dataset, table or file.`, { code: 'invalid_ref' });
  }
}

function requireEntity(entities: ReadonlySet<string>, entity: string, projectId: string): void {
  if (!entities.has(entity)) throw new ForbiddenError(`This API key cannot reach project ${projectId}.`);
}

/** A dataset value (`{rows: <table ref>}`), a table ref string, or a plain list of rows. */
async function rowsOf(db: Kysely<Database>, resolver: RefResolver, value: unknown, url: string): Promise<unknown[]> {
  // Stored values may hold LosslessNumbers (`1.0`, big integers); training rows are plain JSON.
  if (Array.isArray(value)) return value.map(toPlainJson);
  const rows = value !== null && typeof value === 'object' ? (value as Record<string, unknown>).rows : value;
  if (Array.isArray(rows)) return rows.map(toPlainJson);
  if (typeof rows === 'string' && rows.startsWith(REF_SCHEME)) {
    const table: WeaveRef = parseRef(rows);
    resolver.checkProject(table, rows);
    if (table.kind === 'table') return tableRows(db, resolver.projectId, table.digest, rows);
  }
  throw new InvalidRequestError(`Training data ${url} is not a dataset: its value has no rows table.`, { code: 'not_a_dataset' });
}

async function tableRows(db: Kysely<Database>, projectId: string, digest: string, url: string): Promise<unknown[]> {
  const exists = await tables.readTableDigests(db, { projectId, digest });
  if (!exists) throw new NotFoundError('table', undefined, { message: `Table ${digest} not found in ${projectId} (${url})` });
  const rows = await tables.queryRows(db, { projectId, digest });
  return rows.map((r) => toPlainJson(r.val));
}

/** The rows of a JSONL file stored through /file/create (src/http/json-lines.ts); a problem is a 400 `invalid_jsonl`. */
function fileRows(bytes: Uint8Array, url: string): unknown[] {
  try {
    return readJsonLines(bytes);
  } catch (error) {
    if (error instanceof JsonLinesError) throw new InvalidRequestError(`Training data ${url}: ${error.message}.`, { code: 'invalid_jsonl' });
    throw error;
  }
}
