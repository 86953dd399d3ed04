import { sql, type Kysely, type RawBuilder } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import type { Database, DatabaseHandle } from '../../src/db/index.js';
import { callsWindowQuery } from '../../src/tracing/repositories/calls.js';
import { uniqueName } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
import { rowsRead } from '../helpers/plan.js';

let database: DatabaseHandle | undefined;
afterEach(async () => {
  await database?.close();
  database = undefined;
});

async function seedCalls(db: Kysely<Database>, projectId: string, count: number): Promise<void> {
  await sql`insert into trace_calls (project_id, id, trace_id, op_name, started_at, inputs, summary)
    select ${projectId}, 'call-' || lpad(n::text, 6, '0'), 'trace-' || n, 'weave:///e/p/op/step:d1',
      timestamptz '2025-01-01' + n * interval '1 second', '{"n": 1}', '{}'
    from generate_series(1, ${count}::int) n`.execute(db);
}

const rowsReadFromCalls = (db: Kysely<Database>, query: RawBuilder<unknown>) => rowsRead(db, query, 'trace_calls');

describe('a window of a calls list', () => {
  it('reads its window once, even for a project the planner statistics do not know yet', async () => {
    database = await freshDatabase();
    const { db } = database;
    await seedCalls(db, uniqueName('e/known'), 3000);
    await sql`analyze trace_calls`.execute(db);
    const projectId = uniqueName('e/new'); // estimated at one row
    await seedCalls(db, projectId, 2000);

    const query = callsWindowQuery({ projectId, selection: {} }, { limit: 50, offset: 500 });
    const rows = (await query.execute(db)).rows;
    expect(rows.map((row) => row.id)).toEqual(Array.from({ length: 50 }, (_, i) => `call-${String(501 + i).padStart(6, '0')}`));
    // The window's 550 sort keys (PostgreSQL 15 reads one more), then its 50 rows by primary key; the
    // nested loop this replaced read the subquery's 550 rows again for each of the project's 2,000 calls
    // (1,100,000 rows).
    expect(await rowsReadFromCalls(db, query)).toBeLessThan(1000);
  });

  it('after a call deep in the list, reads the window rather than every call before it', async () => {
    database = await freshDatabase();
    const { db } = database;
    const projectId = uniqueName('e/deep');
    await seedCalls(db, projectId, 20_000);
    await sql`analyze trace_calls`.execute(db);

    for (const sortBy of [undefined, [{ field: 'started_at', direction: 'desc' }]]) {
      // call-010000 started 10,000 seconds into 2025.
      const after = { id: 'call-010000', startedAt: '2025-01-01T02:46:40.000000Z' };
      const query = callsWindowQuery({ projectId, sortBy, selection: {} }, { limit: 50, offset: 0, after });
      const rows = (await query.execute(db)).rows;
      const next = (i: number) => `call-${String(sortBy ? 9999 - i : 10001 + i).padStart(6, '0')}`;
      expect(rows.map((row) => row.id)).toEqual(Array.from({ length: 50 }, (_, i) => next(i)));
      // The window's 50 keys and its 50 rows; OFFSET 10,000 read 10,050 keys.
      expect(await rowsReadFromCalls(db, query)).toBeLessThan(500);
    }
  });
});
