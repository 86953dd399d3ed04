import { sql, type RawBuilder } from 'kysely';
import { parseStoredJson } from '../json.js';
import { byteOrder } from '../query/values.js';
import { isoText, jsonbText, toInt, type Executor } from './common.js';

/** trace_objects: one row per object version, keyed by (project, object id, kind, digest). */

export type ObjectKind = 'op' | 'object';

export interface ObjectVersionRow {
  project_id: string;
  object_id: string;
  digest: string;
  kind: ObjectKind;
  base_object_class: string | null;
  leaf_object_class: string | null;
  version_index: number;
  is_latest: number;
  created_at: string;
  deleted_at: string | null;
  wb_user_id: string | null;
  val?: unknown;
  size_bytes?: number;
}

const IS_LATEST = sql`(case when o.deleted_at is null and o.version_index = (
    select max(l.version_index) from trace_objects l
    where l.project_id = o.project_id and l.object_id = o.object_id and l.kind = o.kind and l.deleted_at is null)
  then 1 else 0 end)`;

function columns(options: { val?: boolean; size?: boolean } = {}): RawBuilder<unknown> {
  const items = [
    sql`o.project_id, o.object_id, o.digest, o.kind, o.base_object_class, o.leaf_object_class, o.version_index, o.wb_user_id`,
    sql`${IS_LATEST} as is_latest`,
    sql`${isoText(sql.ref('o.created_at'))} as created_at`,
    sql`${isoText(sql.ref('o.deleted_at'))} as deleted_at`,
  ];
  // As text, parsed losslessly: `1.0` and big integers read back as they were sent (docs/tracing.md).
  if (options.val !== false) items.push(sql`o.val::text as val`);
  if (options.size) items.push(sql`octet_length(o.val::text) as size_bytes`);
  return sql.join(items);
}

function normalise(row: ObjectVersionRow): ObjectVersionRow {
  return {
    ...row,
    version_index: toInt(row.version_index),
    is_latest: toInt(row.is_latest),
    ...(row.val !== undefined ? { val: parseStoredJson(row.val as string | null) } : {}),
    ...(row.size_bytes !== undefined ? { size_bytes: toInt(row.size_bytes) } : {}),
  };
}

/** Serialises writers of one object id so that version indices are assigned without races. */
export async function lockObjectId(trx: Executor, args: { projectId: string; objectId: string }): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtextextended(${`${args.projectId}/${args.objectId}`}, 0))`.execute(trx);
}

export async function findVersion(
  db: Executor,
  args: { projectId: string; objectId: string; kind: ObjectKind; digest: string },
): Promise<{ version_index: number; deleted_at: Date | null } | undefined> {
  return db
    .selectFrom('trace_objects')
    .select(['version_index', 'deleted_at'])
    .where('project_id', '=', args.projectId)
    .where('object_id', '=', args.objectId)
    .where('kind', '=', args.kind)
    .where('digest', '=', args.digest)
    .executeTakeFirst();
}

export interface NewObjectVersion {
  projectId: string;
  objectId: string;
  kind: ObjectKind;
  digest: string;
  baseObjectClass: string | null;
  leafObjectClass: string | null;
  /** JSON text of the value, numbers as sent. */
  val: string;
  wbUserId: string;
}

/** Inserts the next version (index = highest so far + 1, deleted versions included). Caller holds the lock. */
export async function insertVersion(trx: Executor, version: NewObjectVersion): Promise<void> {
  await sql`insert into trace_objects (project_id, object_id, kind, digest, base_object_class, leaf_object_class, val, version_index, wb_user_id)
    select ${version.projectId}, ${version.objectId}, ${version.kind}, ${version.digest}, ${version.baseObjectClass}, ${version.leafObjectClass},
      ${jsonbText(version.val)}, coalesce(max(version_index) + 1, 0), ${version.wbUserId}
    from trace_objects where project_id = ${version.projectId} and object_id = ${version.objectId} and kind = ${version.kind}`.execute(trx);
}

export async function undeleteVersion(trx: Executor, args: { projectId: string; objectId: string; kind: ObjectKind; digest: string }): Promise<void> {
  await trx
    .updateTable('trace_objects')
    .set({ deleted_at: null })
    .where('project_id', '=', args.projectId)
    .where('object_id', '=', args.objectId)
    .where('kind', '=', args.kind)
    .where('digest', '=', args.digest)
    .execute();
}

export type VersionSelector = { latest: true } | { versionIndex: number } | { digest: string };

/**
 * One version of an object id, deleted or not: by digest (or a user alias naming one), by version index,
 * or the latest live one. With `latest` and no live version, the most recent deleted one (so the caller
 * can say when).
 */
export async function readVersion(
  db: Executor,
  args: { projectId: string; objectId: string; selector: VersionSelector; metadataOnly?: boolean },
): Promise<ObjectVersionRow | undefined> {
  const { selector } = args;
  // version_index is an int4: a larger vN names no version (rather than failing the bind).
  if ('versionIndex' in selector && !(selector.versionIndex <= 2147483647)) return undefined;
  const condition =
    'latest' in selector
      ? sql`true`
      : 'versionIndex' in selector
        ? sql`o.version_index = ${selector.versionIndex}`
        : sql`(o.digest = ${selector.digest} or o.digest = (select a.digest from trace_object_aliases a
            where a.project_id = ${args.projectId} and a.object_id = ${args.objectId} and a.alias = ${selector.digest}))`;
  // A digest wins over an alias of the same name.
  const exact = 'digest' in selector ? sql`(o.digest = ${selector.digest}) desc,` : sql``;
  const { rows } = await sql<ObjectVersionRow>`select ${columns({ val: !args.metadataOnly })} from trace_objects o
    where o.project_id = ${args.projectId} and o.object_id = ${args.objectId} and ${condition}
    order by ${exact} (o.deleted_at is null) desc, o.version_index desc, o.kind
    limit 1`.execute(db);
  return rows[0] ? normalise(rows[0]) : undefined;
}

/** Versions by (object id, digest), deleted ones included, for resolving refs. */
export async function readVersionsByDigest(
  db: Executor,
  args: { projectId: string; keys: readonly { objectId: string; digest: string }[] },
): Promise<ObjectVersionRow[]> {
  if (args.keys.length === 0) return [];
  const pairs = sql.join(args.keys.map((k) => sql`(${k.objectId}::text, ${k.digest}::text)`));
  const { rows } = await sql<ObjectVersionRow>`select ${columns()} from trace_objects o
    where o.project_id = ${args.projectId} and (o.object_id, o.digest) in (${pairs})`.execute(db);
  return rows.map(normalise);
}

export interface ObjectsQuery {
  projectId: string;
  baseObjectClasses?: readonly string[] | null;
  excludeBaseObjectClasses?: readonly string[] | null;
  leafObjectClasses?: readonly string[] | null;
  objectIds?: readonly string[] | null;
  isOp?: boolean | null;
  latestOnly?: boolean | null;
  /** Versions with any of these tags. */
  tags?: readonly string[] | null;
  /** Versions any of these aliases name (`latest`: the latest version). */
  aliases?: readonly string[] | null;
  sortBy?: readonly { field: 'object_id' | 'created_at'; direction: 'asc' | 'desc' }[];
  limit?: number | null;
  offset?: number | null;
  metadataOnly?: boolean;
  includeSize?: boolean;
}

/** Live versions matching the filter; default order is creation (version) order. */
export async function queryVersions(db: Executor, q: ObjectsQuery): Promise<ObjectVersionRow[]> {
  const conditions = [sql`o.project_id = ${q.projectId}`, sql`o.deleted_at is null`];
  if (q.baseObjectClasses?.length) conditions.push(sql`o.base_object_class in (${sql.join(q.baseObjectClasses)})`);
  if (q.excludeBaseObjectClasses?.length) {
    conditions.push(sql`(o.base_object_class is null or o.base_object_class not in (${sql.join(q.excludeBaseObjectClasses)}))`);
  }
  if (q.leafObjectClasses?.length) conditions.push(sql`o.leaf_object_class in (${sql.join(q.leafObjectClasses)})`);
  if (q.objectIds?.length) conditions.push(sql`o.object_id in (${sql.join(q.objectIds)})`);
  if (q.isOp != null) conditions.push(sql`o.kind = ${q.isOp ? 'op' : 'object'}`);
  if (q.latestOnly) conditions.push(sql`${IS_LATEST} = 1`);
  if (q.tags?.length) {
    conditions.push(sql`exists (select 1 from trace_object_tags t
      where t.project_id = o.project_id and t.object_id = o.object_id and t.digest = o.digest and t.tag in (${sql.join(q.tags)}))`);
  }
  if (q.aliases?.length) {
    const named = q.aliases.filter((a) => a !== 'latest');
    const either = [];
    if (named.length) {
      either.push(sql`exists (select 1 from trace_object_aliases a
        where a.project_id = o.project_id and a.object_id = o.object_id and a.digest = o.digest and a.alias in (${sql.join(named)}))`);
    }
    if (named.length < q.aliases.length) either.push(sql`${IS_LATEST} = 1`);
    conditions.push(sql`(${sql.join(either, sql` or `)})`);
  }
  // object_id sorts in byte order whatever the database's collation (as weave's stores do).
  const key = (field: string) => (field === 'object_id' ? byteOrder(sql.ref(`o.${field}`)) : sql.ref(`o.${field}`));
  const order = (q.sortBy ?? []).map((s) => sql`${key(s.field)} ${sql.raw(s.direction)}`);
  order.push(sql`o.created_at asc`, sql`${key('object_id')} asc`, sql`o.version_index asc`);
  const { rows } = await sql<ObjectVersionRow>`select ${columns({ val: !q.metadataOnly, size: q.includeSize })} from trace_objects o
    where ${sql.join(conditions, sql` and `)} order by ${sql.join(order)}
    ${q.limit != null ? sql`limit ${q.limit}` : sql``} ${q.offset ? sql`offset ${q.offset}` : sql``}`.execute(db);
  return rows.map(normalise);
}

/** Soft-deletes live versions (all of them, or those with the given digests); returns the digests deleted. */
export async function deleteVersions(db: Executor, args: { projectId: string; objectId: string; digests?: readonly string[] }): Promise<string[]> {
  let query = db
    .updateTable('trace_objects')
    .set({ deleted_at: sql`now()` as never })
    .where('project_id', '=', args.projectId)
    .where('object_id', '=', args.objectId)
    .where('deleted_at', 'is', null);
  if (args.digests?.length) query = query.where('digest', 'in', args.digests);
  const rows = await query.returning('digest').execute();
  return rows.map((r) => r.digest);
}

/** The live digests among the given ones. */
export async function liveDigests(db: Executor, args: { projectId: string; objectId: string; digests: readonly string[] }): Promise<Set<string>> {
  if (args.digests.length === 0) return new Set();
  const rows = await db
    .selectFrom('trace_objects')
    .select('digest')
    .where('project_id', '=', args.projectId)
    .where('object_id', '=', args.objectId)
    .where('digest', 'in', args.digests)
    .where('deleted_at', 'is', null)
    .execute();
  return new Set(rows.map((r) => r.digest));
}
