import { sql, type Kysely } from 'kysely';

/**
 * The W&B API subset the wandb SDK uses (src/wandb): runs with their history lines, content-addressed
 * blobs per entity, artifact collections, versions, their files and aliases. Names are W&B's: an
 * entity is trainyard's entity, a project is any name under it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('wandb_runs')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('entity', 'text', (c) => c.notNull())
    .addColumn('project', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('display_name', 'text')
    .addColumn('job_type', 'text')
    .addColumn('config', 'text')
    .addColumn('summary', 'text')
    .addColumn('history_line_count', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('exitcode', 'integer')
    .addColumn('completed_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('wandb_runs_name_uq', ['entity', 'project', 'name'])
    .execute();
  await db.schema
    .createTable('wandb_run_history')
    .addColumn('run_id', 'bigint', (c) => c.notNull().references('wandb_runs.id').onDelete('cascade'))
    .addColumn('line', 'integer', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('wandb_run_history_pk', ['run_id', 'line'])
    .execute();
  await db.schema
    .createTable('wandb_run_files')
    .addColumn('run_id', 'bigint', (c) => c.notNull().references('wandb_runs.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('upload_token', 'text', (c) => c.notNull().unique())
    .addColumn('md5', 'text')
    .addPrimaryKeyConstraint('wandb_run_files_pk', ['run_id', 'name'])
    .execute();

  // One copy of each content per entity: uploads of a file another artifact already holds are skipped.
  await db.schema
    .createTable('wandb_blobs')
    .addColumn('entity', 'text', (c) => c.notNull())
    .addColumn('md5', 'text', (c) => c.notNull())
    .addColumn('size', 'bigint', (c) => c.notNull())
    .addColumn('data', 'bytea', (c) => c.notNull())
    .addPrimaryKeyConstraint('wandb_blobs_pk', ['entity', 'md5'])
    .execute();

  await db.schema
    .createTable('wandb_collections')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('entity', 'text', (c) => c.notNull())
    .addColumn('project', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('wandb_collections_name_uq', ['entity', 'project', 'name'])
    .execute();
  await db.schema
    .createTable('wandb_artifacts')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('collection_id', 'bigint', (c) => c.notNull().references('wandb_collections.id').onDelete('cascade'))
    .addColumn('version_index', 'integer')
    .addColumn('state', 'text', (c) => c.notNull().check(sql`state in ('PENDING', 'COMMITTED')`))
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('metadata', 'text')
    .addColumn('run_name', 'text')
    .addColumn('storage_region', 'text')
    // The aliases asked for at creation, applied at commit: a `:latest` lookup never meets a PENDING version.
    .addColumn('pending_aliases', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('manifest_token', 'text', (c) => c.notNull().unique())
    .addColumn('manifest_md5', 'text')
    .addColumn('manifest_expected_md5', 'text')
    .addColumn('size', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('file_count', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('wandb_artifacts_version_uq', ['collection_id', 'version_index'])
    .execute();
  await db.schema.createIndex('wandb_artifacts_digest_idx').on('wandb_artifacts').columns(['collection_id', 'digest']).execute();
  await db.schema
    .createTable('wandb_artifact_files')
    .addColumn('artifact_id', 'bigint', (c) => c.notNull().references('wandb_artifacts.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('md5', 'text', (c) => c.notNull())
    .addColumn('size', 'bigint')
    .addColumn('birth_artifact_id', 'bigint', (c) => c.notNull())
    .addColumn('token', 'text', (c) => c.notNull().unique())
    .addPrimaryKeyConstraint('wandb_artifact_files_pk', ['artifact_id', 'name'])
    .execute();
  await db.schema
    .createTable('wandb_aliases')
    .addColumn('collection_id', 'bigint', (c) => c.notNull().references('wandb_collections.id').onDelete('cascade'))
    .addColumn('alias', 'text', (c) => c.notNull())
    .addColumn('artifact_id', 'bigint', (c) => c.notNull().references('wandb_artifacts.id').onDelete('cascade'))
    .addPrimaryKeyConstraint('wandb_aliases_pk', ['collection_id', 'alias'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['wandb_aliases', 'wandb_artifact_files', 'wandb_artifacts', 'wandb_collections', 'wandb_blobs', 'wandb_run_files', 'wandb_run_history', 'wandb_runs']) {
    await db.schema.dropTable(table).execute();
  }
}
