import type { Kysely } from 'kysely';

/**
 * What a worker's resident trainers hold (docs/workers.md, "Resident trainers"): the base model each keeps
 * loaded and the model whose adapter it last trained, as the worker reported with its latest claim.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('workers').addColumn('resident_trainers', 'jsonb').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('workers').dropColumn('resident_trainers').execute();
}
