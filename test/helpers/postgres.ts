import pg from 'pg';

/** Set to run the suite on a PostgreSQL server instead of PGlite, e.g. postgres://postgres@127.0.0.1:5432/postgres */
export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL || undefined;

/** The server URL with another database name. */
export function databaseUrl(database: string): string {
  const url = new URL(TEST_DATABASE_URL!);
  url.pathname = `/${database}`;
  return url.toString();
}

export function adminPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 1 });
  // An idle connection the server ends emits 'error' on the pool, an uncaught error unless heard; the
  // pool opens a new connection for the next query.
  pool.on('error', () => undefined);
  return pool;
}
