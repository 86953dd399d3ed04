import { sql, type Kysely } from 'kysely';

/** Training: models, checkpoints, logged trajectories and metrics, jobs with their inputs and events, workers. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('models')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('entity_id', 'uuid', (c) => c.notNull().references('entities.id').onDelete('cascade'))
    .addColumn('project', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('base_model', 'text', (c) => c.notNull())
    .addColumn('run_id', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('deleted_at', 'timestamptz')
    .execute();
  // Names are unique among live models only, so that a deleted model's name can be registered again.
  await db.schema
    .createIndex('models_name_key')
    .on('models')
    .columns(['entity_id', 'project', 'name'])
    .unique()
    .where(sql.ref('deleted_at'), 'is', null)
    .execute();

  await db.schema
    .createTable('checkpoints')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('model_id', 'uuid', (c) => c.notNull().references('models.id').onDelete('cascade'))
    .addColumn('step', 'integer', (c) => c.notNull().check(sql`step >= 0`))
    .addColumn('uri', 'text', (c) => c.notNull())
    .addColumn('metrics', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('job_id', 'uuid')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // Also the index for listing a model's checkpoints by step.
    .addUniqueConstraint('checkpoints_model_step_key', ['model_id', 'step'])
    .execute();

  await db.schema
    .createTable('trajectory_logs')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('model_id', 'uuid', (c) => c.notNull().references('models.id').onDelete('cascade'))
    .addColumn('log_id', 'uuid', (c) => c.notNull())
    .addColumn('split', 'text', (c) => c.notNull())
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('payload', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('trajectory_logs_model_idx').on('trajectory_logs').columns(['model_id', 'split', 'step']).execute();

  await db.schema
    .createTable('metric_history')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('model_id', 'uuid', (c) => c.notNull().references('models.id').onDelete('cascade'))
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('split', 'text', (c) => c.notNull())
    .addColumn('metrics', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('metric_history_model_idx').on('metric_history').columns(['model_id', 'split', 'step']).execute();

  await db.schema
    .createTable('training_jobs')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('seq', 'bigint', (c) => c.notNull().unique().generatedAlwaysAsIdentity())
    .addColumn('model_id', 'uuid', (c) => c.notNull().references('models.id').onDelete('cascade'))
    .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('rl', 'sft')`))
    .addColumn('status', 'text', (c) =>
      c.notNull().check(sql`status in ('QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELED')`),
    )
    .addColumn('attempt', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('max_attempts', 'integer', (c) => c.notNull().check(sql`max_attempts >= 1`))
    .addColumn('base_step', 'integer')
    .addColumn('target_step', 'integer')
    .addColumn('config', 'jsonb', (c) => c.notNull())
    .addColumn('num_inputs', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('training_start', 'timestamptz')
    .addColumn('training_end', 'timestamptz')
    .addColumn('error_message', 'text')
    .addColumn('lease_token', 'uuid')
    .addColumn('lease_expires_at', 'timestamptz')
    .addColumn('worker_id', 'text')
    .addColumn('cancel_requested', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('checkpoint_id', 'uuid', (c) => c.references('checkpoints.id').onDelete('set null'))
    .execute();
  // The claim: oldest queued job first (seq is creation order).
  await db.schema.createIndex('training_jobs_claim_idx').on('training_jobs').columns(['status', 'seq']).execute();
  // One job per model at a time, in creation order; also a model's job list.
  await db.schema.createIndex('training_jobs_model_idx').on('training_jobs').columns(['model_id', 'seq']).execute();
  // The lease sweeper reads only running jobs.
  await db.schema
    .createIndex('training_jobs_lease_idx')
    .on('training_jobs')
    .column('lease_expires_at')
    .where(sql.ref('status'), '=', 'RUNNING')
    .execute();

  await db.schema
    .createTable('job_inputs')
    .addColumn('job_id', 'uuid', (c) => c.notNull().references('training_jobs.id').onDelete('cascade'))
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('payload', 'jsonb', (c) => c.notNull())
    .addPrimaryKeyConstraint('job_inputs_pk', ['job_id', 'seq'])
    .execute();

  await db.schema
    .createTable('job_events')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('seq', 'bigint', (c) => c.notNull().generatedAlwaysAsIdentity())
    .addColumn('job_id', 'uuid', (c) => c.notNull().references('training_jobs.id').onDelete('cascade'))
    .addColumn('attempt', 'integer', (c) => c.notNull())
    .addColumn('type', 'text', (c) =>
      c.notNull().check(sql`type in ('training_started', 'gradient_step', 'training_ended', 'training_failed')`),
    )
    .addColumn('data', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('job_events_job_seq_idx').on('job_events').columns(['job_id', 'seq']).unique().execute();

  await db.schema
    .createTable('workers')
    .addColumn('worker_id', 'text', (c) => c.primaryKey())
    .addColumn('api_key_id', 'uuid', (c) => c.references('api_keys.id').onDelete('set null'))
    .addColumn('last_seen_at', 'timestamptz', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('workers').execute();
  await db.schema.dropTable('job_events').execute();
  await db.schema.dropTable('job_inputs').execute();
  await db.schema.dropTable('training_jobs').execute();
  await db.schema.dropTable('metric_history').execute();
  await db.schema.dropTable('trajectory_logs').execute();
  await db.schema.dropTable('checkpoints').execute();
  await db.schema.dropTable('models').execute();
}
