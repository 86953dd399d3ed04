import { sql, type Kysely } from 'kysely';

/**
 * User-set tags and aliases of object versions (docs/tracing.md, "Tags and aliases"). A tag belongs to
 * one version; an alias names one version per object id, so setting it again moves it. Both are keyed by
 * object id and digest, not by kind, as weave's stores key them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('trace_object_tags')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('object_id', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('tag', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('trace_object_tags_pk', ['project_id', 'object_id', 'digest', 'tag'])
    .execute();
  await db.schema.createIndex('trace_object_tags_tag_idx').on('trace_object_tags').columns(['project_id', 'tag']).execute();

  await db.schema
    .createTable('trace_object_aliases')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('object_id', 'text', (c) => c.notNull())
    .addColumn('alias', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('trace_object_aliases_pk', ['project_id', 'object_id', 'alias'])
    .execute();
  await db.schema.createIndex('trace_object_aliases_digest_idx').on('trace_object_aliases').columns(['project_id', 'object_id', 'digest']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('trace_object_aliases').execute();
  await db.schema.dropTable('trace_object_tags').execute();
}
