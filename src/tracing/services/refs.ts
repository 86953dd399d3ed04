import { ForbiddenError, InvalidRequestError, NotFoundError } from '../../errors.js';
import { isWeaveRef, parseRef, refProjectId, type ObjectRef, type RefPathStep, type WeaveRef } from '../refs.js';
import { isLosslessNumber, losslessJsonText, toPlainJson } from '../json.js';
import type { Executor } from '../repositories/common.js';
import * as objects from '../repositories/objects.js';
import * as tables from '../repositories/tables.js';
import { answerTooLarge, TRACING_LIMITS } from '../schemas/common.js';
import type { TracingDeps } from './deps.js';
import { parseVersionSelector } from './objects.js';

/** Resolving refs to values (reference §2.6, §3.4). */

export const MAX_REFS = 1000;

type Resolved = { ok: true; value: unknown } | { ok: false; reason: 'missing' | 'deleted' };

/**
 * Resolves object/op refs and walks their extra path (`key`/`attr` into dicts, `index` into lists, `id`
 * into table rows), following nested object refs along the way. Every ref it meets must be in
 * `projectId`: a ref into another project is a 400. Loads are cached for one request.
 */
export class RefResolver {
  private readonly versions = new Map<string, objects.ObjectVersionRow | null>();
  private readonly aliasesTried = new Set<string>();

  constructor(
    private readonly db: Executor,
    readonly projectId: string,
  ) {}

  checkProject(ref: WeaveRef, uri: string): void {
    if (refProjectId(ref) !== this.projectId) {
      throw new InvalidRequestError(`Ref ${uri} names project ${refProjectId(ref)}; only refs into ${this.projectId} can be resolved here.`, {
        code: 'ref_other_project',
      });
    }
  }

  /** Loads the versions behind the refs in one query. */
  async prefetch(refs: readonly ObjectRef[]): Promise<void> {
    const keys = refs
      .filter((r) => !isAlias(r.digest) && !this.versions.has(versionKey(r.name, r.digest)))
      .map((r) => ({ objectId: r.name, digest: r.digest }));
    if (keys.length === 0) return;
    const rows = await objects.readVersionsByDigest(this.db, { projectId: this.projectId, keys });
    for (const key of keys) this.versions.set(versionKey(key.objectId, key.digest), null);
    for (const row of rows) this.versions.set(versionKey(row.object_id, row.digest), row);
  }

  async version(ref: ObjectRef): Promise<objects.ObjectVersionRow | null> {
    if (isAlias(ref.digest) && !this.versions.has(versionKey(ref.name, ref.digest))) {
      // `latest` and `v<N>` name a version as /obj/read does (the newest live one for `latest`).
      const selector = parseVersionSelector(ref.digest);
      const row = await objects.readVersion(this.db, { projectId: this.projectId, objectId: ref.name, selector });
      this.versions.set(versionKey(ref.name, ref.digest), row ?? null);
    }
    const key = versionKey(ref.name, ref.digest);
    if (!this.versions.has(key)) await this.prefetch([ref]);
    if (this.versions.get(key) === null && !this.aliasesTried.has(key)) {
      // No version has this digest: it may be a user alias (`weave.ref("name:production")`).
      this.aliasesTried.add(key);
      const row = await objects.readVersion(this.db, { projectId: this.projectId, objectId: ref.name, selector: { digest: ref.digest } });
      this.versions.set(key, row ?? null);
    }
    return this.versions.get(key) ?? null;
  }

  /** An object ref's value with its path walked. */
  async resolveObject(ref: ObjectRef): Promise<Resolved> {
    if (ref.digest === '*') {
      throw new InvalidRequestError(`Ref ${uriOf(ref)} must name a version (a digest, latest, v<N> or an alias), not ${ref.digest}.`, { code: 'invalid_ref' });
    }
    const version = await this.version(ref);
    if (!version) return { ok: false, reason: 'missing' };
    if (version.deleted_at) return { ok: false, reason: 'deleted' };
    return this.walk(version.val, ref.path);
  }

  async walk(start: unknown, path: readonly RefPathStep[]): Promise<Resolved> {
    let value = start;
    for (let i = 0; i < path.length; i++) {
      const step = path[i];
      if (isWeaveRef(value)) {
        // A nested ref with more path to walk: resolve it and go on (reference §3.4 step 3).
        const nested = parseRef(value);
        this.checkProject(nested, value);
        if (nested.kind === 'object' || nested.kind === 'op') {
          const inner = await this.resolveObject({ ...nested, path: [] });
          if (!inner.ok) return inner;
          value = inner.value;
        } else if (nested.kind !== 'table' || step.edge !== 'id') {
          return { ok: false, reason: 'missing' };
        }
      }
      switch (step.edge) {
        case 'key':
        case 'attr':
          value = isRecord(value) && Object.hasOwn(value, step.value) ? value[step.value] : undefined;
          break;
        case 'index': {
          const index = Number(step.value);
          value = Array.isArray(value) ? value[index < 0 ? value.length + index : index] : undefined;
          break;
        }
        case 'id': {
          if (!isWeaveRef(value)) return { ok: false, reason: 'missing' };
          const table = parseRef(value);
          this.checkProject(table, value);
          if (table.kind !== 'table') return { ok: false, reason: 'missing' };
          const digests = await tables.readTableDigests(this.db, { projectId: this.projectId, digest: table.digest });
          if (!digests?.includes(step.value)) return { ok: false, reason: 'missing' };
          value = (await tables.readRow(this.db, { projectId: this.projectId, digest: step.value }))?.val;
          break;
        }
      }
      if (value === undefined) return { ok: false, reason: 'missing' };
    }
    return { ok: true, value };
  }
}

/** A version name rather than a digest: `latest` or `v<N>` (user aliases are tried when no digest matches). */
const isAlias = (digest: string) => digest === 'latest' || /^v[0-9]+$/.test(digest);
const versionKey = (name: string, digest: string) => `${name}\u0000${digest}`;
const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && !isLosslessNumber(value);
const uriOf = (ref: ObjectRef) => `weave:///${ref.entity}/${ref.project}/${ref.kind}/${ref.name}:${ref.digest}`;

/**
 * `/refs/read_batch`: the answer's JSON text, `{"vals": [...]}`, one value per ref, in order, written
 * losslessly (stored number text as stored). All refs must be object or op refs into one project the key
 * reaches (403 otherwise; a ref into a second project is a 400). A missing version fails the whole
 * request (404); a deleted one, or a path that leads nowhere, reads as null. Values past
 * TRACING_LIMITS.answerBytes in all are a 400 naming how many fit (a single value is always answered):
 * 1,000 refs to one 1 MB object would otherwise be a 1 GB answer, past the longest string V8 holds.
 */
export async function readRefsBatch(deps: TracingDeps, args: { refs: readonly string[]; entities: ReadonlySet<string> }): Promise<string> {
  if (args.refs.length > MAX_REFS) {
    throw new InvalidRequestError(`Cannot read more than ${MAX_REFS} refs at once (got ${args.refs.length}); split the request.`, { code: 'too_many_refs' });
  }
  if (args.refs.length === 0) return '{"vals":[]}';
  const parsed = args.refs.map((uri) => {
    const ref = parseRef(uri);
    if (ref.kind !== 'object' && ref.kind !== 'op') {
      throw new InvalidRequestError(`Ref ${uri} is a ${ref.kind} ref; read_batch reads object and op refs.`, { code: 'invalid_ref' });
    }
    return ref;
  });
  const projectId = refProjectId(parsed[0]);
  if (!args.entities.has(parsed[0].entity)) throw new ForbiddenError(`This API key cannot reach project ${projectId}.`);
  const resolver = new RefResolver(deps.db, projectId);
  parsed.forEach((ref, i) => resolver.checkProject(ref, args.refs[i]));
  await resolver.prefetch(parsed);
  const texts: string[] = [];
  // Refs to one value (the resolver loads each version once) share its text.
  const written = new Map<unknown, { text: string; bytes: number }>();
  let bytes = 0;
  for (let i = 0; i < parsed.length; i++) {
    const result = await resolver.resolveObject(parsed[i]);
    if (!result.ok && result.reason === 'missing' && !(await resolver.version(parsed[i]))) {
      throw new NotFoundError('object', undefined, { message: `Obj ${parsed[i].name}:${parsed[i].digest} not found` });
    }
    const value = result.ok ? result.value : null;
    let entry = written.get(value);
    if (!entry) {
      const text = losslessJsonText(value);
      entry = { text, bytes: Buffer.byteLength(text) + 1 };
      if (value !== null && typeof value === 'object') written.set(value, entry);
    }
    bytes += entry.bytes;
    if (bytes > TRACING_LIMITS.answerBytes && texts.length > 0) {
      throw answerTooLarge('values of these refs', '/refs/read_batch', texts.length, 'Read fewer refs per call.');
    }
    texts.push(entry.text);
  }
  return `{"vals":[${texts.join(',')}]}`;
}

/**
 * For expand_columns: the values of those refs that resolve (object and op refs into `projectId`).
 * Anything else is left as it is: deleted or missing objects, malformed refs, and refs into another
 * project, at the column or nested in the walk (a call may name an object of another project; a read of
 * calls is never the place to refuse that, and filters and sorts read such a column as missing too).
 */
export async function expandRefs(db: Executor, projectId: string, refs: readonly string[]): Promise<Map<string, unknown>> {
  const resolver = new RefResolver(db, projectId);
  const parsed = new Map<string, ObjectRef>();
  for (const uri of new Set(refs)) {
    let ref: WeaveRef;
    try {
      ref = parseRef(uri);
    } catch {
      continue; // not a ref we can expand: leave it
    }
    if (ref.kind !== 'object' && ref.kind !== 'op') continue;
    if (refProjectId(ref) !== projectId) continue;
    if (ref.digest !== 'latest' && ref.digest !== '*') parsed.set(uri, ref);
  }
  await resolver.prefetch([...parsed.values()]);
  const out = new Map<string, unknown>();
  for (const [uri, ref] of parsed) {
    try {
      const result = await resolver.resolveObject(ref);
      // Call payloads are plain JSON (docs/tracing.md): expanded values are too.
      if (result.ok) out.set(uri, toPlainJson(result.value));
    } catch (error) {
      // a malformed nested ref, or one into another project: leave this one unexpanded
      if (!(error instanceof InvalidRequestError)) throw error;
    }
  }
  return out;
}
