import type { Kysely } from 'kysely';

/**
 * Checkpoints by storage URI: a delete looks up whether a remaining checkpoint still names the storage it
 * would release (docs/training.md, "What a delete releases"). A hash index, since URIs are compared only for
 * equality and may be longer than a B-tree row holds.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('checkpoints_uri_idx').on('checkpoints').using('hash').column('uri').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('checkpoints_uri_idx').execute();
}
