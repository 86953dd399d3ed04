import { ConflictError, InvalidRequestError, NotFoundError } from '../../errors.js';
import { processBuiltinObject } from '../builtin-classes.js';
import { objectDigest } from '../digest.js';
import { storedJsonText, toPlainJson, type LosslessJson } from '../json.js';
import { mapJsonbErrors } from '../repositories/common.js';
import * as labels from '../repositories/object-labels.js';
import * as repo from '../repositories/objects.js';
import { TRACING_LIMITS } from '../schemas/common.js';
import type { TracingDeps } from './deps.js';

/** Objects and ops: versions by content digest (reference §2.3, §3.1, §3.3). */

const OBJECT_ID = /^[A-Za-z0-9_.-]{1,128}$/;
export const MAX_DELETE_DIGESTS = 100;

export interface ObjectCreate {
  projectId: string;
  objectId: string;
  /** The value as parsed losslessly, so that its digest matches Python's. */
  val: LosslessJson;
  builtinObjectClass?: string | null;
  expectedDigest?: string | null;
  userId: string;
}

/** Kind and classes of a value (reference §3.1). */
export function classify(val: unknown): { kind: repo.ObjectKind; base: string | null; leaf: string | null } {
  const plain = val as Record<string, unknown> | null;
  const isObject = plain !== null && typeof plain === 'object' && !Array.isArray(plain);
  const weaveType = isObject ? (plain.weave_type as Record<string, unknown> | undefined) : undefined;
  const kind = isObject && plain._type === 'CustomWeaveType' && weaveType?.type === 'Op' ? 'op' : 'object';
  const bases = isObject ? plain._bases : undefined;
  if (Array.isArray(bases) && bases.length >= 2 && bases.every((b) => typeof b === 'string') && bases[bases.length - 1] === 'BaseModel') {
    const second = bases[bases.length - 2];
    if (second === 'Object' || second === 'BaseObject') {
      const leaf = typeof plain!._class_name === 'string' ? plain!._class_name : null;
      return { kind, base: bases.length > 2 ? (bases[bases.length - 3] as string) : leaf, leaf };
    }
  }
  return { kind, base: null, leaf: null };
}

/** Creates a version, or returns the existing one with the same digest (no new version). */
export async function createObject(deps: TracingDeps, input: ObjectCreate): Promise<{ digest: string; object_id: string }> {
  if (!OBJECT_ID.test(input.objectId)) {
    throw new InvalidRequestError(
      `Invalid object_id ${JSON.stringify(input.objectId)}: use 1 to 128 letters, digits, '_', '-' and '.'.`,
      { code: 'invalid_object_id', param: 'object_id' },
    );
  }
  const val = input.builtinObjectClass ? processBuiltinObject(input.val, input.builtinObjectClass) : input.val;
  const digest = objectDigest(val);
  if (input.expectedDigest && input.expectedDigest !== digest) {
    throw new ConflictError(`Digest mismatch: expected ${input.expectedDigest}, computed ${digest}.`, { code: 'digest_mismatch' });
  }
  const plain = toPlainJson(val);
  // A builtin class's dumped value names its classes in _class_name and _bases.
  const { kind, base, leaf } = classify(plain);
  // The base class is indexed after the project id: a name past what an index entry takes is refused here.
  if (base !== null && Buffer.byteLength(base, 'utf8') > TRACING_LIMITS.opNameBytes) {
    throw new InvalidRequestError(`The object's base class name (from _bases or _class_name) takes more than ${TRACING_LIMITS.opNameBytes} bytes of UTF-8.`);
  }
  const key = { projectId: input.projectId, objectId: input.objectId, kind, digest };
  await mapJsonbErrors(() =>
    deps.db.transaction().execute(async (trx) => {
      await repo.lockObjectId(trx, key);
      const existing = await repo.findVersion(trx, key);
      if (!existing) {
        await repo.insertVersion(trx, { ...key, baseObjectClass: base, leafObjectClass: leaf, val: storedJsonText(val), wbUserId: input.userId });
      } else if (existing.deleted_at) {
        // Publishing a deleted value again brings that version back, with its old index.
        await repo.undeleteVersion(trx, key);
      }
    }),
  );
  return { digest, object_id: input.objectId };
}

/** `latest`, `v<N>` or a digest (reference §3.3). */
export function parseVersionSelector(digest: string): repo.VersionSelector {
  if (digest === 'latest') return { latest: true };
  const version = /^v(\d+)$/.exec(digest);
  if (version) return { versionIndex: Number(version[1]) };
  return { digest };
}

export function deletedError(row: repo.ObjectVersionRow): NotFoundError {
  return new NotFoundError('object', undefined, {
    message: `${row.object_id}:v${row.version_index} was deleted at ${row.deleted_at}`,
    code: 'object_deleted',
    extra: { deleted_at: row.deleted_at },
  });
}

export function toObjSchema(row: repo.ObjectVersionRow, options: { metadataOnly?: boolean } = {}): Record<string, unknown> {
  const out: Record<string, unknown> = {
    project_id: row.project_id,
    object_id: row.object_id,
    created_at: row.created_at,
    deleted_at: row.deleted_at,
    digest: row.digest,
    version_index: row.version_index,
    is_latest: row.is_latest,
    kind: row.kind,
    base_object_class: row.base_object_class,
    leaf_object_class: row.leaf_object_class,
    val: options.metadataOnly ? {} : (row.val ?? null),
    wb_user_id: row.wb_user_id,
  };
  if (row.size_bytes !== undefined) out.size_bytes = row.size_bytes;
  return out;
}

/**
 * Adds `tags` (in byte order) and `aliases` to ObjSchema answers, as weave's `include_tags_and_aliases`
 * does: the user aliases naming the version, after a virtual `latest` on the latest version.
 */
async function attachLabels(deps: TracingDeps, projectId: string, objs: Record<string, unknown>[]): Promise<void> {
  const found = await labels.labelsOf(deps.db, { projectId, objectIds: objs.map((o) => o.object_id as string) });
  for (const obj of objs) {
    const own = found.get(labels.labelKey(obj.object_id as string, obj.digest as string)) ?? { tags: [], aliases: [] };
    obj.tags = own.tags;
    obj.aliases = obj.is_latest === 1 ? ['latest', ...own.aliases] : own.aliases;
  }
}

/** `digest` may be a digest, `latest`, `v<N>` or a user alias. */
export async function readObject(
  deps: TracingDeps,
  args: { projectId: string; objectId: string; digest: string; metadataOnly?: boolean; includeTagsAndAliases?: boolean },
): Promise<Record<string, unknown>> {
  if (args.digest === '*') {
    throw new InvalidRequestError(`Obj ${args.objectId}:* must name a version (a digest, latest, v<N> or an alias), not *.`, { code: 'invalid_digest' });
  }
  const row = await repo.readVersion(deps.db, { ...args, selector: parseVersionSelector(args.digest) });
  if (!row) throw new NotFoundError('object', undefined, { message: `Obj ${args.objectId}:${args.digest} not found` });
  if (row.deleted_at) throw deletedError(row);
  const obj = toObjSchema(row, args);
  if (args.includeTagsAndAliases) await attachLabels(deps, args.projectId, [obj]);
  return obj;
}

export interface ObjectsQueryInput {
  projectId: string;
  filter?: {
    base_object_classes?: string[] | null;
    exclude_base_object_classes?: string[] | null;
    leaf_object_classes?: string[] | null;
    object_ids?: string[] | null;
    is_op?: boolean | null;
    latest_only?: boolean | null;
    tags?: string[] | null;
    aliases?: string[] | null;
  } | null;
  sortBy?: { field: string; direction: string }[] | null;
  limit?: number | null;
  offset?: number | null;
  metadataOnly?: boolean | null;
  includeStorageSize?: boolean | null;
  includeTagsAndAliases?: boolean | null;
}

export async function queryObjects(deps: TracingDeps, input: ObjectsQueryInput): Promise<Record<string, unknown>[]> {
  const sortBy = (input.sortBy ?? []).map(({ field, direction }) => {
    if (field !== 'object_id' && field !== 'created_at') {
      throw new InvalidRequestError(`Cannot sort objects by ${JSON.stringify(field)}: use object_id or created_at.`, { code: 'invalid_sort' });
    }
    if (direction !== 'asc' && direction !== 'desc') {
      throw new InvalidRequestError(`Invalid sort direction ${JSON.stringify(direction)}: expected asc or desc`, { code: 'invalid_sort' });
    }
    return { field, direction } as const;
  });
  const f = input.filter ?? {};
  const rows = await repo.queryVersions(deps.db, {
    projectId: input.projectId,
    baseObjectClasses: f.base_object_classes,
    excludeBaseObjectClasses: f.exclude_base_object_classes,
    leafObjectClasses: f.leaf_object_classes,
    objectIds: f.object_ids,
    isOp: f.is_op,
    latestOnly: f.latest_only,
    tags: f.tags,
    aliases: f.aliases,
    sortBy,
    limit: input.limit,
    offset: input.offset,
    metadataOnly: Boolean(input.metadataOnly),
    includeSize: Boolean(input.includeStorageSize),
  });
  const objs = rows.map((row) => toObjSchema(row, { metadataOnly: Boolean(input.metadataOnly) }));
  if (input.includeTagsAndAliases) await attachLabels(deps, input.projectId, objs);
  return objs;
}

/**
 * Soft-deletes versions (all when no digests are given), with their tags and aliases. Version indices
 * stay; `latest` moves to the newest remaining version. Nothing live to delete, or a listed digest that is not live, is a 404.
 */
export async function deleteObject(deps: TracingDeps, args: { projectId: string; objectId: string; digests?: string[] | null }): Promise<number> {
  const digests = args.digests ?? [];
  if (digests.length > MAX_DELETE_DIGESTS) {
    throw new InvalidRequestError(`Cannot delete more than ${MAX_DELETE_DIGESTS} versions at once (got ${digests.length}).`, { code: 'too_many_digests' });
  }
  return deps.db.transaction().execute(async (trx) => {
    await repo.lockObjectId(trx, args);
    if (digests.length) {
      const live = await repo.liveDigests(trx, { ...args, digests });
      const missing = [...new Set(digests)].filter((d) => !live.has(d));
      if (missing.length) {
        throw new NotFoundError('object', undefined, { message: `Object ${args.objectId} has no live version with digest ${missing.join(', ')}` });
      }
    }
    const deleted = await repo.deleteVersions(trx, { ...args, digests });
    if (deleted.length === 0) throw new NotFoundError('object', undefined, { message: `Object ${args.objectId} not found` });
    // As weave's stores do: a deleted version loses its tags and the aliases naming it.
    await labels.deleteForDigests(trx, { ...args, digests: deleted });
    return deleted.length;
  });
}
