import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { down, up } from '../../migrations/0003_tracing.js';
import { createPglite, pgliteHandle, type DatabaseHandle } from '../../src/db/index.js';
import { jsonb, parseLossless, type JsonValue } from '../../src/tracing/json.js';
import { callsOrderBy, callsWhere } from '../../src/tracing/query/calls.js';
import { parseQuery, type CallsFilter, type SortBy } from '../../src/tracing/query/schema.js';
import type { TracingTables } from '../../src/tracing/tables.js';

/** The compiled SQL run on a real (embedded) Postgres over the tracing migration. */

let handle: DatabaseHandle;
let db: Kysely<TracingTables>;

const OP = 'weave:///e/p/op/score:d1';

interface CallSeed {
  id: string;
  started?: string | null;
  ended?: string | null;
  op_name?: string;
  display_name?: string | null;
  parent_id?: string | null;
  exception?: string | null;
  inputs?: JsonValue;
  output?: JsonValue;
  summary?: JsonValue;
  input_refs?: string[];
  project_id?: string;
  deleted?: boolean;
}

async function seed(calls: CallSeed[]): Promise<void> {
  await db
    .insertInto('trace_calls')
    .values(
      calls.map((c) => ({
        project_id: c.project_id ?? 'e/p',
        id: c.id,
        trace_id: 't1',
        parent_id: c.parent_id ?? null,
        op_name: c.op_name ?? OP,
        display_name: c.display_name ?? null,
        started_at: c.started === undefined ? '2025-01-01T00:00:00Z' : c.started,
        ended_at: c.ended === undefined ? '2025-01-01T00:00:01.250Z' : c.ended,
        exception: c.exception ?? null,
        attributes: jsonb({}),
        inputs: jsonb(c.inputs ?? {}),
        output: jsonb(c.output ?? null),
        summary: jsonb(c.summary ?? {}),
        input_refs: c.input_refs ?? [],
        deleted_at: c.deleted ? '2025-01-02T00:00:00Z' : null,
      })),
    )
    .execute();
}

async function ids(options: { filter?: CallsFilter; expr?: unknown; sortBy?: SortBy[] } = {}): Promise<string[]> {
  const query = options.expr === undefined ? null : parseQuery({ $expr: options.expr });
  const rows = await db
    .selectFrom('trace_calls')
    .select('id')
    .where(callsWhere({ projectId: 'e/p', filter: options.filter, query }))
    .orderBy(callsOrderBy(options.sortBy))
    .execute();
  return rows.map((r) => r.id);
}

const field = (path: string) => ({ $getField: path });
const lit = (value: unknown) => ({ $literal: value });

beforeAll(async () => {
  handle = pgliteHandle(await createPglite());
  db = handle.db as unknown as Kysely<TracingTables>; // the lead registers the tracing tables in Database
  await up(db as Kysely<unknown>);
  await seed([
    { id: 'a', inputs: { n: 10, name: 'Alpha', ref: 'weave:///e/p/object/ds:v1' }, output: { score: 0.9 }, input_refs: ['weave:///e/p/object/ds:v1'] },
    { id: 'b', started: '2025-01-01T00:00:02Z', ended: null, inputs: { n: 2, name: 'beta' }, parent_id: 'a', display_name: '' },
    { id: 'c', started: '2025-01-01T00:00:03Z', exception: 'boom', inputs: { n: 'x' }, op_name: 'weave:///e/p/op/other:d2', display_name: 'Named' },
    { id: 'd', started: '2025-01-01T00:00:04Z', summary: { status_counts: { error: 1 } }, inputs: { n: null }, output: 'plain' },
    { id: 'e', started: null, ended: '2025-01-01T00:00:05Z' },
    { id: 'f', deleted: true },
    { id: 'g', project_id: 'e/other' },
  ]);
});

afterAll(async () => {
  await handle?.close();
});

describe('compiled calls queries on Postgres', () => {
  it('lists started, undeleted calls of the project in start order', async () => {
    expect(await ids()).toEqual(['a', 'b', 'c', 'd']);
  });

  it('filters by op name wildcard, refs and roots', async () => {
    expect(await ids({ filter: { op_names: ['weave:///e/p/op/other:*'] } })).toEqual(['c']);
    expect(await ids({ filter: { input_refs: ['weave:///e/p/object/ds:*'] } })).toEqual(['a']);
    expect(await ids({ filter: { input_refs: ['weave:///e/p/object/ds:v1'] } })).toEqual(['a']);
    expect(await ids({ filter: { trace_roots_only: true } })).toEqual(['a', 'c', 'd']);
  });

  it('compares JSON numbers with inferred casts and skips values that are not numbers', async () => {
    expect(await ids({ expr: { $gt: [field('inputs.n'), lit(5)] } })).toEqual(['a']);
    expect(await ids({ expr: { $gte: [field('output.score'), lit(0.5)] } })).toEqual(['a']);
  });

  it('matches substrings case-insensitively', async () => {
    expect(await ids({ expr: { $contains: { input: field('inputs.name'), substr: lit('ALP'), case_insensitive: true } } })).toEqual(['a']);
  });

  it('derives status, latency and trace name', async () => {
    expect(await ids({ expr: { $eq: [field('summary.weave.status'), lit('running')] } })).toEqual(['b']);
    expect(await ids({ expr: { $eq: [field('summary.weave.status'), lit('error')] } })).toEqual(['c']);
    expect(await ids({ expr: { $eq: [field('summary.weave.status'), lit('descendant_error')] } })).toEqual(['d']);
    expect(await ids({ expr: { $eq: [field('summary.weave.latency_ms'), lit(1250)] } })).toEqual(['a']);
    expect(await ids({ expr: { $in: [field('summary.weave.trace_name'), [lit('score'), lit('Named')]] } })).toEqual(['a', 'b', 'c', 'd']);
  });

  it('lets $not not match calls whose column is null (SQL NOT, as weave\'s stores)', async () => {
    expect(await ids({ expr: { $not: [{ $eq: [field('display_name'), lit('Named')] }] } })).toEqual([]);
    expect(await ids({ expr: { $not: [{ $eq: [field('display_name'), lit(null)] }] } })).toEqual(['c']);
  });

  it('tells an explicit JSON null from a missing path with exists', async () => {
    expect(await ids({ expr: { $and: [{ $convert: { input: field('inputs.n'), to: 'exists' } }] } })).toEqual(['a', 'b', 'c', 'd']);
    expect(await ids({ expr: { $eq: [field('inputs.n'), lit(null)] } })).toEqual(['d']);
    expect(await ids({ expr: { $eq: [field('display_name'), lit(null)] } })).toEqual(['a', 'b', 'd']);
  });

  it('compares datetime columns with unix seconds and ISO strings', async () => {
    const after = Date.parse('2025-01-01T00:00:02.500Z') / 1000;
    expect(await ids({ expr: { $gt: [field('started_at'), lit(after)] } })).toEqual(['c', 'd']);
    expect(await ids({ expr: { $lt: [field('started_at'), lit('2025-01-01T00:00:01Z')] } })).toEqual(['a']);
  });

  it('sorts JSON paths numerically with missing and non-numeric values last', async () => {
    expect(await ids({ sortBy: [{ field: 'inputs.n', direction: 'desc' }] })).toEqual(['a', 'b', 'c', 'd']);
    expect(await ids({ sortBy: [{ field: 'inputs.n', direction: 'asc' }] })).toEqual(['b', 'a', 'c', 'd']);
    expect(await ids({ sortBy: [{ field: 'ended_at', direction: 'desc' }] })).toEqual(['a', 'c', 'd', 'b']);
  });

  it('treats hostile paths and values as data', async () => {
    const hostile = `x'); drop table trace_calls; --`;
    expect(await ids({ expr: { $eq: [field(`inputs.${hostile}`), lit(hostile)] } })).toEqual([]);
    expect(await ids({ filter: { call_ids: [hostile] } })).toEqual([]);
    expect(await ids()).toHaveLength(4);
  });
});

describe('tracing migration', () => {
  it('writes JSONB keeping float literals, big integers and top-level arrays', async () => {
    const value = parseLossless('{"f": 1.0, "big": 123456789012345678901, "list": [1, "x"]}');
    const row = await sql<{ v: string }>`select (${jsonb(value)})::text as v`.execute(db);
    expect(row.rows[0].v).toBe('{"f": 1.0, "big": 123456789012345678901, "list": [1, "x"]}');
    const list = await sql<{ v: string }>`select (${jsonb([1, 2])})::text as v`.execute(db);
    expect(list.rows[0].v).toBe('[1, 2]');
  });

  it('reverts cleanly', async () => {
    await down(db as Kysely<unknown>);
    const left = await sql<{ n: number }>`select count(*)::int as n from pg_tables where tablename like 'trace\\_%'`.execute(db);
    expect(left.rows[0].n).toBe(0);
    await up(db as Kysely<unknown>);
  });
});
