import { sql, type Kysely } from 'kysely';

/** Tracing storage: calls, object versions, tables and their rows, files (src/tracing/tables.ts). */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('trace_calls')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('trace_id', 'text')
    .addColumn('parent_id', 'text')
    .addColumn('op_name', 'text')
    .addColumn('display_name', 'text')
    .addColumn('thread_id', 'text')
    .addColumn('turn_id', 'text')
    .addColumn('started_at', 'timestamptz')
    .addColumn('ended_at', 'timestamptz')
    .addColumn('exception', 'text')
    .addColumn('attributes', 'jsonb')
    .addColumn('inputs', 'jsonb')
    .addColumn('output', 'jsonb')
    .addColumn('summary', 'jsonb')
    .addColumn('otel_dump', 'jsonb')
    .addColumn('input_refs', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('output_refs', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('wb_user_id', 'text')
    .addColumn('wb_run_id', 'text')
    .addColumn('wb_run_step', 'bigint')
    .addColumn('wb_run_step_end', 'bigint')
    .addColumn('deleted_at', 'timestamptz')
    .addPrimaryKeyConstraint('trace_calls_pk', ['project_id', 'id'])
    .execute();
  // Default listing order is started_at, then id.
  await db.schema.createIndex('trace_calls_started_idx').on('trace_calls').columns(['project_id', 'started_at', 'id']).execute();
  await db.schema.createIndex('trace_calls_trace_idx').on('trace_calls').columns(['project_id', 'trace_id']).execute();
  await db.schema.createIndex('trace_calls_parent_idx').on('trace_calls').columns(['project_id', 'parent_id']).execute();
  // text_pattern_ops serves both exact op names and the `name:*` prefix filter (LIKE 'prefix%');
  // started_at after it serves "the latest calls of this op" without sorting them all.
  await sql`create index trace_calls_op_idx on trace_calls (project_id, op_name text_pattern_ops, started_at)`.execute(db);
  await db.schema.createIndex('trace_calls_thread_idx').on('trace_calls').columns(['project_id', 'thread_id']).where(sql.ref('thread_id'), 'is not', null).execute();
  await db.schema.createIndex('trace_calls_turn_idx').on('trace_calls').columns(['project_id', 'turn_id']).where(sql.ref('turn_id'), 'is not', null).execute();
  await db.schema.createIndex('trace_calls_input_refs_idx').on('trace_calls').using('gin').column('input_refs').execute();
  await db.schema.createIndex('trace_calls_output_refs_idx').on('trace_calls').using('gin').column('output_refs').execute();

  await db.schema
    .createTable('trace_objects')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('object_id', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('op', 'object')`))
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('base_object_class', 'text')
    .addColumn('leaf_object_class', 'text')
    .addColumn('val', 'jsonb', (c) => c.notNull())
    .addColumn('version_index', 'integer', (c) => c.notNull())
    .addColumn('wb_user_id', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('deleted_at', 'timestamptz')
    .addPrimaryKeyConstraint('trace_objects_pk', ['project_id', 'object_id', 'kind', 'digest'])
    .addUniqueConstraint('trace_objects_version_uq', ['project_id', 'object_id', 'kind', 'version_index'])
    .execute();
  await db.schema.createIndex('trace_objects_created_idx').on('trace_objects').columns(['project_id', 'created_at']).execute();
  await db.schema.createIndex('trace_objects_class_idx').on('trace_objects').columns(['project_id', 'base_object_class']).execute();

  await db.schema
    .createTable('trace_table_rows')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('val', 'jsonb', (c) => c.notNull())
    .addPrimaryKeyConstraint('trace_table_rows_pk', ['project_id', 'digest'])
    .execute();

  await db.schema
    .createTable('trace_tables')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('row_digests', sql`text[]`, (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('trace_tables_pk', ['project_id', 'digest'])
    .execute();

  await db.schema
    .createTable('trace_files')
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('content', 'bytea', (c) => c.notNull())
    .addColumn('size_bytes', 'bigint', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('trace_files_pk', ['project_id', 'digest'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('trace_files').execute();
  await db.schema.dropTable('trace_tables').execute();
  await db.schema.dropTable('trace_table_rows').execute();
  await db.schema.dropTable('trace_objects').execute();
  await db.schema.dropTable('trace_calls').execute();
}
