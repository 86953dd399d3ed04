import { sql } from 'kysely';
import { byteOrder } from '../query/values.js';
import type { Executor } from './common.js';

/** trace_object_tags and trace_object_aliases: user-set tags (per version) and aliases (per object id). */

interface VersionKey {
  projectId: string;
  objectId: string;
  digest: string;
}

export async function insertTags(db: Executor, args: VersionKey & { tags: readonly string[] }): Promise<void> {
  if (args.tags.length === 0) return;
  await db
    .insertInto('trace_object_tags')
    .values(args.tags.map((tag) => ({ project_id: args.projectId, object_id: args.objectId, digest: args.digest, tag })))
    .onConflict((oc) => oc.doNothing())
    .execute();
}

export async function deleteTags(db: Executor, args: VersionKey & { tags: readonly string[] }): Promise<void> {
  if (args.tags.length === 0) return;
  await db
    .deleteFrom('trace_object_tags')
    .where('project_id', '=', args.projectId)
    .where('object_id', '=', args.objectId)
    .where('digest', '=', args.digest)
    .where('tag', 'in', args.tags)
    .execute();
}

/** Points each alias at the version, moving it from whichever version of the object it named. */
export async function setAliases(db: Executor, args: VersionKey & { aliases: readonly string[] }): Promise<void> {
  if (args.aliases.length === 0) return;
  await db
    .insertInto('trace_object_aliases')
    .values(args.aliases.map((alias) => ({ project_id: args.projectId, object_id: args.objectId, alias, digest: args.digest })))
    .onConflict((oc) => oc.columns(['project_id', 'object_id', 'alias']).doUpdateSet({ digest: args.digest, created_at: sql`now()` as never }))
    .execute();
}

export async function deleteAliases(db: Executor, args: { projectId: string; objectId: string; aliases: readonly string[] }): Promise<void> {
  if (args.aliases.length === 0) return;
  await db
    .deleteFrom('trace_object_aliases')
    .where('project_id', '=', args.projectId)
    .where('object_id', '=', args.objectId)
    .where('alias', 'in', args.aliases)
    .execute();
}

/** Drops the tags and aliases of deleted versions. */
export async function deleteForDigests(db: Executor, args: { projectId: string; objectId: string; digests: readonly string[] }): Promise<void> {
  if (args.digests.length === 0) return;
  for (const table of ['trace_object_tags', 'trace_object_aliases'] as const) {
    await db
      .deleteFrom(table)
      .where('project_id', '=', args.projectId)
      .where('object_id', '=', args.objectId)
      .where('digest', 'in', args.digests)
      .execute();
  }
}

/** The distinct tags of a project, in byte order. */
export async function listTags(db: Executor, projectId: string): Promise<string[]> {
  const { rows } = await sql<{ tag: string }>`select tag from trace_object_tags where project_id = ${projectId}
    group by tag order by ${byteOrder(sql.ref('tag'))}`.execute(db);
  return rows.map((r) => r.tag);
}

/** The distinct aliases of a project, in byte order. */
export async function listAliases(db: Executor, projectId: string): Promise<string[]> {
  const { rows } = await sql<{ alias: string }>`select alias from trace_object_aliases where project_id = ${projectId}
    group by alias order by ${byteOrder(sql.ref('alias'))}`.execute(db);
  return rows.map((r) => r.alias);
}

export interface VersionLabels {
  tags: string[];
  aliases: string[];
}

/**
 * Tags and aliases of every version of the given object ids, keyed by `labelKey(objectId, digest)`, each
 * list in byte order. The ids go as one array parameter: an unlimited objs/query may list thousands.
 */
export async function labelsOf(db: Executor, args: { projectId: string; objectIds: readonly string[] }): Promise<Map<string, VersionLabels>> {
  const out = new Map<string, VersionLabels>();
  if (args.objectIds.length === 0) return out;
  const ids = sql`${[...new Set(args.objectIds)]}::text[]`;
  const { rows } = await sql<{ object_id: string; digest: string; kind: 'tag' | 'alias'; name: string }>`
    select * from (
      select object_id, digest, 'tag' as kind, tag as name from trace_object_tags
        where project_id = ${args.projectId} and object_id = any(${ids})
      union all
      select object_id, digest, 'alias' as kind, alias as name from trace_object_aliases
        where project_id = ${args.projectId} and object_id = any(${ids})
    ) l order by ${byteOrder(sql.ref('l.name'))}`.execute(db);
  for (const row of rows) {
    const key = labelKey(row.object_id, row.digest);
    const labels = out.get(key) ?? { tags: [], aliases: [] };
    (row.kind === 'tag' ? labels.tags : labels.aliases).push(row.name);
    out.set(key, labels);
  }
  return out;
}

export const labelKey = (objectId: string, digest: string) => `${objectId}\u0000${digest}`;
