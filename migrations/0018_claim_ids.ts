import { sql, type Kysely } from 'kysely';

/**
 * The id a worker gave the claim that leased a running job (`claim_id`, docs/workers.md): a worker that
 * lost a claim's answer asks again with the same id and gets that job and lease back, instead of a second
 * job while the first sits leased to no one until its lease runs out and its attempt is spent.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('training_jobs').addColumn('claim_id', 'uuid').execute();
  await db.schema
    .createIndex('training_jobs_claim_id_idx')
    .on('training_jobs')
    .column('claim_id')
    .where(sql.ref('claim_id'), 'is not', null)
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('training_jobs_claim_id_idx').execute();
  await db.schema.alterTable('training_jobs').dropColumn('claim_id').execute();
}
