import { sql, type Kysely } from 'kysely';

/**
 * One row naming this database: a random id made once, kept by every copy of it. A backup records it
 * (src/db/backup.ts), so that pruning removes only this database's own backups from a BACKUP_DIR that
 * other servers may share, and so that a restored copy goes on as the same database.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create table trainyard_database (
    id uuid primary key default gen_random_uuid(),
    created_at timestamptz not null default now(),
    one boolean not null default true unique check (one)
  )`.execute(db);
  await sql`insert into trainyard_database default values`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('trainyard_database').execute();
}
