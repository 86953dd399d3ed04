import type { Kysely } from 'kysely';
import type { Database, DatabaseKind } from '../../db/index.js';
import type { CallPageEnds } from './call-pages.js';

/** What the tracing services need: the database and which engine runs it (streaming differs). */
export interface TracingDeps {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseKind;
  /** Where pages of calls lists ended, for the next page to start there (the app's own). */
  readonly callPages?: CallPageEnds;
}
