import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import type { DatabaseHandle } from '../../src/db/index.js';
import { queryRows, tableRowsQuery } from '../../src/tracing/repositories/tables.js';
import { uniqueName } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
import { rowsRead } from '../helpers/plan.js';

let database: DatabaseHandle | undefined;
afterEach(async () => {
  await database?.close();
  database = undefined;
});

describe('a page of a table in insertion order', () => {
  it('reads its own rows only, however deep it is', async () => {
    database = await freshDatabase();
    const { db } = database;
    const projectId = uniqueName('e/table');
    await sql`insert into trace_table_rows (project_id, digest, val)
      select ${projectId}, 'row-' || n, jsonb_build_object('n', n) from generate_series(1, 5000) n`.execute(db);
    await sql`insert into trace_tables (project_id, digest, row_digests)
      select ${projectId}, 'table', array_agg('row-' || n order by n) from generate_series(1, 5000) n`.execute(db);

    const page = { projectId, digest: 'table', limit: 100, offset: 4000 };
    const rows = await queryRows(db, page);
    expect(rows.map((row) => [row.val, row.original_index])).toEqual(Array.from({ length: 100 }, (_, i) => [{ n: 4001 + i }, 4000 + i]));
    expect(await rowsRead(db, tableRowsQuery(page), 'trace_table_rows')).toBe(100);
    // Sorted, every row is read to order them.
    expect(await rowsRead(db, tableRowsQuery({ ...page, sortBy: [{ field: 'n', direction: 'desc' }] }), 'trace_table_rows')).toBe(5000);
  });
});
