import type { Kysely } from 'kysely';

/**
 * Checkpoints as W&B `lora` artifacts (docs/training.md, "W&B API"): a model's checkpoint is served as a
 * version of the artifact named after the model. Its W&B row (metadata, the manifest's and files' URL
 * tokens, the files' MD5s) lives as long as the checkpoint; the bytes stay in the checkpoint's directory.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('wandb_artifacts')
    .addColumn('checkpoint_id', 'uuid', (c) => c.unique().references('checkpoints.id').onDelete('cascade'))
    .execute();
  // "<size>:<mtime ms>" of a file read from a checkpoint directory when its MD5 was taken: a file changed
  // since is hashed again, and never served under the old MD5.
  await db.schema.alterTable('wandb_artifact_files').addColumn('stat', 'text').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('wandb_artifact_files').dropColumn('stat').execute();
  await db.schema.alterTable('wandb_artifacts').dropColumn('checkpoint_id').execute();
}
