import { z } from 'zod';
import { AnyJson, Key, StoredJson, KeyList, Limit, Offset, ProjectId, SortByList } from './common.js';

/** Objects (reference §2.3). */

export const ObjCreateBody = z.object({
  obj: z.object({
    project_id: ProjectId,
    object_id: Key.describe('1 to 128 of [A-Za-z0-9_.-]'),
    val: StoredJson,
    builtin_object_class: Key.nullish().describe("A weave builtin class (AnnotationSpec, Leaderboard, SavedView, ...): the value is validated and stored in weave's dumped form; 400 for an unknown class."),
    set_base_object_class: Key.nullish().describe('Deprecated alias of builtin_object_class.'),
    expected_digest: Key.nullish().describe('409 when the computed digest differs.'),
    wb_user_id: Key.nullish(),
  }),
});
export const ObjCreateResponse = z.object({ digest: z.string(), object_id: z.string() });

export const ObjSchema = z.object({
  project_id: z.string(),
  object_id: z.string(),
  created_at: z.string(),
  deleted_at: z.string().nullable(),
  digest: z.string(),
  version_index: z.number(),
  is_latest: z.number().describe('1 or 0'),
  kind: z.enum(['op', 'object']),
  base_object_class: z.string().nullable(),
  leaf_object_class: z.string().nullable(),
  val: AnyJson,
  wb_user_id: z.string().nullable(),
  size_bytes: z.number().optional(),
  tags: z.array(z.string()).optional().describe('With include_tags_and_aliases: the version\'s tags, in byte order.'),
  aliases: z.array(z.string()).optional().describe('With include_tags_and_aliases: "latest" on the latest version, then the user aliases naming it.'),
});

export const ObjReadBody = z.object({
  project_id: ProjectId,
  object_id: Key,
  digest: Key.describe('A digest, "latest", "v<N>" or a user alias.'),
  metadata_only: z.boolean().nullish(),
  include_tags_and_aliases: z.boolean().nullish(),
});
export const ObjReadResponse = z.object({ obj: ObjSchema });

export const ObjQueryBody = z.object({
  project_id: ProjectId,
  filter: z
    .object({
      base_object_classes: KeyList.nullish(),
      exclude_base_object_classes: KeyList.nullish(),
      leaf_object_classes: KeyList.nullish(),
      object_ids: KeyList.nullish(),
      is_op: z.boolean().nullish(),
      latest_only: z.boolean().nullish(),
      tags: KeyList.nullish().describe('Versions with any of these tags.'),
      aliases: KeyList.nullish().describe('Versions any of these aliases name ("latest": the latest version).'),
    })
    .nullish(),
  limit: Limit,
  offset: Offset,
  sort_by: SortByList.nullish().describe('object_id or created_at'),
  metadata_only: z.boolean().nullish(),
  include_storage_size: z.boolean().nullish(),
  include_tags_and_aliases: z.boolean().nullish(),
});
export const ObjQueryResponse = z.object({ objs: z.array(ObjSchema) });

export const ObjDeleteBody = z.object({
  project_id: ProjectId,
  object_id: Key,
  digests: z.array(Key).nullish().describe('At most 100; none: every version.'),
});
export const ObjDeleteResponse = z.object({ num_deleted: z.number() });

/** Tags and aliases (weave's `/objs/{object_id}/...` routes; names are checked by the service). */
/** A path segment: weave's object ids and aliases are at most 128 characters, digests 64. */
const PathKey = z.string().min(1).max(256);
export const ObjectIdParams = z.object({ object_id: PathKey });
export const ObjectVersionParams = z.object({ object_id: PathKey, digest: PathKey.describe('A digest; "latest", "v<N>" or an alias also name one.') });
export const ObjTagsBody = z.object({ project_id: ProjectId, tags: KeyList });
export const ObjSetAliasesBody = z.object({ project_id: ProjectId, digest: Key.describe('A digest; "latest", "v<N>" or an alias also name one.'), aliases: KeyList });
export const ObjRemoveAliasesBody = z.object({ project_id: ProjectId, aliases: KeyList });
export const ProjectQuery = z.object({ project_id: ProjectId });
export const TagsListResponse = z.object({ tags: z.array(z.string()) });
export const AliasesListResponse = z.object({ aliases: z.array(z.string()) });
