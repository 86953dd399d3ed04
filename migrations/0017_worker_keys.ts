import { sql, type Kysely } from 'kysely';

/**
 * Worker rows are keyed by (api key, worker_id): `worker_id` is chosen by each worker, so as one namespace
 * across tenants a claim of one tenant's worker overwrote another's row (its key and resident trainers).
 * A row now goes with its key (deleted with it: two keys' rows of one worker id would collide as
 * (null, worker_id)), has an id for the admin listing's cursor, and an index on `last_seen_at` for the
 * system check's count, the listing and the sweep that forgets long-unseen workers. NULLS NOT DISTINCT is
 * PostgreSQL 15.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table workers drop constraint workers_pkey`.execute(db);
  await sql`alter table workers drop constraint workers_api_key_id_fkey`.execute(db);
  await sql`alter table workers add constraint workers_api_key_id_fkey foreign key (api_key_id) references api_keys (id) on delete cascade`.execute(db);
  await sql`alter table workers add column id uuid not null default gen_random_uuid() primary key`.execute(db);
  await db.schema.createIndex('workers_key_worker_idx').on('workers').columns(['api_key_id', 'worker_id']).unique().nullsNotDistinct().execute();
  await db.schema.createIndex('workers_last_seen_idx').on('workers').columns(['last_seen_at', 'id']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('workers_last_seen_idx').execute();
  await db.schema.dropIndex('workers_key_worker_idx').execute();
  // One row per worker_id again: the most recently seen one stays.
  await sql`delete from workers w using workers n where n.worker_id = w.worker_id and (n.last_seen_at, n.id) > (w.last_seen_at, w.id)`.execute(db);
  await sql`alter table workers drop column id`.execute(db);
  await sql`alter table workers drop constraint workers_api_key_id_fkey`.execute(db);
  await sql`alter table workers add constraint workers_api_key_id_fkey foreign key (api_key_id) references api_keys (id) on delete set null`.execute(db);
  await sql`alter table workers add primary key (worker_id)`.execute(db);
}
