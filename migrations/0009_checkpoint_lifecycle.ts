import { sql, type Kysely } from 'kysely';

/**
 * Checkpoint lifecycle and fair sharing of workers (docs/training.md, "Checkpoint lifecycle" and
 * "Fair share"): a retention policy per model, pinned and imported checkpoints, the storage a deleted
 * checkpoint leaves for the workers' side to release, and the turn each entity last had at a claim.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('models')
    .addColumn('keep_latest', 'integer', (c) => c.check(sql`keep_latest >= 1`))
    .addColumn('keep_best', 'integer', (c) => c.check(sql`keep_best >= 1`))
    .addColumn('best_metric', 'text')
    .addColumn('best_mode', 'text', (c) => c.notNull().defaultTo('max').check(sql`best_mode in ('max', 'min')`))
    .addColumn('checkpoint_ttl_seconds', 'integer', (c) => c.check(sql`checkpoint_ttl_seconds >= 1`))
    .execute();

  await db.schema
    .alterTable('checkpoints')
    .addColumn('pinned', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('source', 'text', (c) => c.notNull().defaultTo('trained').check(sql`source in ('trained', 'imported')`))
    .execute();

  // URIs of deleted checkpoints whose storage trainyard does not own: the workers' side lists and releases them.
  await db.schema
    .createTable('checkpoint_releases')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('entity_id', 'uuid', (c) => c.notNull().references('entities.id').onDelete('cascade'))
    .addColumn('uri', 'text', (c) => c.notNull())
    .addColumn('reason', 'text', (c) => c.notNull().check(sql`reason in ('deleted', 'retention', 'expired')`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('checkpoint_releases_entity_idx').on('checkpoint_releases').columns(['entity_id', 'id']).execute();

  // Round-robin claims: the entity whose last turn is oldest goes next. A sequence, not a timestamp, so
  // that two claims in the same microsecond still order.
  await sql`create sequence claim_turn_seq`.execute(db);
  await db.schema
    .createTable('entity_claim_turns')
    .addColumn('entity_id', 'uuid', (c) => c.primaryKey().references('entities.id').onDelete('cascade'))
    .addColumn('turn', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('entity_claim_turns').execute();
  await sql`drop sequence claim_turn_seq`.execute(db);
  await db.schema.dropTable('checkpoint_releases').execute();
  await db.schema.alterTable('checkpoints').dropColumn('pinned').dropColumn('source').execute();
  await db.schema
    .alterTable('models')
    .dropColumn('keep_latest')
    .dropColumn('keep_best')
    .dropColumn('best_metric')
    .dropColumn('best_mode')
    .dropColumn('checkpoint_ttl_seconds')
    .execute();
}
