import type { Kysely } from 'kysely';
import type { Database, DatabaseKind } from '../../db/index.js';

/** What the tracing services need: the database and which engine runs it (streaming differs). */
export interface TracingDeps {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseKind;
}
