import { sql, type Kysely } from 'kysely';

/**
 * Deleted checkpoints, remembered for a day so that a client paging a model's checkpoints with the id of
 * one deleted between two pages (retention, a delete) gets the next page instead of a 422
 * (docs/training.md, "Endpoints"). Written in the deleting transaction; forgotten when the model is
 * deleted or by the expiry sweep.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('deleted_checkpoints')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('model_id', 'uuid', (c) => c.notNull().references('models.id').onDelete('cascade'))
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('deleted_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('deleted_checkpoints_model_idx').on('deleted_checkpoints').column('model_id').execute();
  await db.schema.createIndex('deleted_checkpoints_deleted_at_idx').on('deleted_checkpoints').column('deleted_at').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('deleted_checkpoints').execute();
}
