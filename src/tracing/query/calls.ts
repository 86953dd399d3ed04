import { sql, type RawBuilder, type SqlBool } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { CALLS_TABLE, callFieldResolver } from './call-fields.js';
import { compileExpr } from './expr.js';
import type { CallsFilter, Query, SortBy } from './schema.js';
import { byteOrder, sortExprs } from './values.js';

/**
 * The WHERE and ORDER BY of a calls query (reference §3.7): project scope, the filter, the `$expr`
 * query and the sort, as kysely `sql` fragments over `trace_calls` with every value bound.
 */

const col = (name: string) => sql.ref(`${CALLS_TABLE}.${name}`);

/** Columns that are never null on a call that queries can see (started_at is part of callsWhere). */
const NEVER_NULL = new Set(['id', 'project_id', 'started_at']);

/** `IN` filters: filter field → column. */
const ID_FILTERS = {
  parent_ids: 'parent_id',
  trace_ids: 'trace_id',
  call_ids: 'id',
  thread_ids: 'thread_id',
  turn_ids: 'turn_id',
  wb_user_ids: 'wb_user_id',
  wb_run_ids: 'wb_run_id',
} as const;

export interface CallsWhere {
  projectId: string;
  filter?: CallsFilter | null;
  query?: Query | null;
  /** The request's expand_columns: filters below them read through refs. */
  expandColumns?: readonly string[] | null;
}

/** Calls of the project that have started and are not deleted, narrowed by the filter and the query. */
export function callsWhere({ projectId, filter, query, expandColumns }: CallsWhere): RawBuilder<SqlBool> {
  const conditions: RawBuilder<unknown>[] = [
    sql`${col('project_id')} = ${projectId}`,
    // A call whose end arrived before its start stays invisible until the start arrives.
    sql`${col('started_at')} is not null`,
    sql`${col('deleted_at')} is null`,
    ...(filter ? filterConditions(filter, projectId) : []),
  ];
  if (query) conditions.push(compileExpr(query.$expr, callFieldResolver({ expandColumns })));
  return sql<SqlBool>`${sql.join(conditions, sql` and `)}`;
}

/**
 * A run id as the SDKs store it: `entity/project/run`. A bare run id in a filter is one of the query's
 * project, as weave's server reads it (the Python SDK's `wb_run_ids=["<run>"]`).
 */
function qualifiedRunId(projectId: string, runId: string): string {
  return runId.includes('/') ? runId : `${projectId}/${runId}`;
}

function filterConditions(filter: CallsFilter, projectId: string): RawBuilder<unknown>[] {
  const conditions: RawBuilder<unknown>[] = [];
  if (filter.op_names?.length) conditions.push(matchOpNames(filter.op_names));
  if (filter.input_refs?.length) conditions.push(matchRefs('input_refs', filter.input_refs));
  if (filter.output_refs?.length) conditions.push(matchRefs('output_refs', filter.output_refs));
  for (const [key, column] of Object.entries(ID_FILTERS)) {
    let values = filter[key as keyof typeof ID_FILTERS];
    if (key === 'wb_run_ids') values = values?.map((runId) => qualifiedRunId(projectId, runId));
    if (values?.length) conditions.push(sql`${col(column)} in (${sql.join(values)})`);
  }
  if (filter.trace_roots_only) conditions.push(sql`${col('parent_id')} is null`);
  return conditions;
}

/** `weave:///e/p/op/name:*` matches every version of the op: a prefix match up to and including the colon. */
function splitWildcards(names: readonly string[]): { exact: string[]; prefixes: string[] } {
  const exact = names.filter((name) => !name.endsWith(':*'));
  const prefixes = names.filter((name) => name.endsWith(':*')).map((name) => likePrefix(name.slice(0, -1)));
  return { exact, prefixes };
}

/** A LIKE pattern matching strings that start with `prefix`; its own % _ and \ are escaped. */
function likePrefix(prefix: string): string {
  return `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

function matchOpNames(names: readonly string[]): RawBuilder<unknown> {
  const { exact, prefixes } = splitWildcards(names);
  const tests = prefixes.map((pattern) => sql`${col('op_name')} like ${pattern}`);
  if (exact.length) tests.unshift(sql`${col('op_name')} in (${sql.join(exact)})`);
  return sql`(${sql.join(tests, sql` or `)})`;
}

/** A call matches when any ref extracted from its inputs (or output) is one of the given refs. */
function matchRefs(column: 'input_refs' | 'output_refs', refs: readonly string[]): RawBuilder<unknown> {
  const { exact, prefixes } = splitWildcards(refs);
  const tests = prefixes.map((pattern) => sql`exists (select 1 from unnest(${col(column)}) as r(ref) where r.ref like ${pattern})`);
  // && against an array of binds can use the GIN index on the column.
  if (exact.length) tests.unshift(sql`${col(column)} && array[${sql.join(exact)}]::text[]`);
  return sql`(${sql.join(tests, sql` or `)})`;
}

/** One key of a calls list's order: `nullable` keys put their missing values last, in both directions. */
interface SortKey {
  expr: RawBuilder<unknown>;
  direction: 'asc' | 'desc';
  nullable: boolean;
  /** A key on a column that is never null: its field, and how any value of it is put in the key's order. */
  column?: { field: string; order(value: RawBuilder<unknown>): RawBuilder<unknown> };
}

const asIs = (value: RawBuilder<unknown>) => value;

/**
 * The order of a calls list. Missing values sort last in both directions; JSON paths sort by their
 * numeric value, then their text (reference §3.7). Without a sort: started_at, then id; id always breaks
 * ties, so the order is total.
 */
function sortKeys(sortBy?: readonly SortBy[] | null, expandColumns?: readonly string[] | null): SortKey[] {
  const resolve = callFieldResolver({ expandColumns });
  const items = sortBy?.length ? sortBy : [{ field: 'started_at', direction: 'asc' }];
  const keys = items.flatMap(({ field, direction }): SortKey[] => {
    if (direction !== 'asc' && direction !== 'desc') {
      throw new InvalidRequestError(`Invalid sort direction ${JSON.stringify(direction)}: expected asc or desc`, { code: 'invalid_sort' });
    }
    const value = resolve(field);
    // Visible calls always have these: a plain direction lets a backward index scan serve `desc`.
    if (NEVER_NULL.has(field) && value.kind === 'typed') {
      const order = value.type === 'text' ? byteOrder : asIs;
      return [{ expr: order(value.sql), direction, nullable: false, column: { field, order } }];
    }
    return sortExprs(value).map((expr) => ({ expr, direction, nullable: true }));
  });
  if (!items.some((item) => item.field === 'id')) keys.push({ expr: col('id'), direction: 'asc', nullable: false, column: { field: 'id', order: asIs } });
  return keys;
}

/** The ORDER BY list of a calls list (sortKeys). */
export function callsOrderBy(sortBy?: readonly SortBy[] | null, expandColumns?: readonly string[] | null): RawBuilder<unknown> {
  return sql.join(sortKeys(sortBy, expandColumns).map(({ expr, direction, nullable }) => sql`${expr} ${sql.raw(direction)}${sql.raw(nullable ? ' nulls last' : '')}`));
}

/** The sort fields a list may start after a position in (callsAfter): columns never null on a visible call. */
const SEEKABLE = new Set(['started_at', 'id']);

/**
 * Whether a list in this order may start after a position (callsAfter) rather than count OFFSET calls:
 * when it sorts by started_at and id only (weave's SDK and the web UI do), which the index on
 * (project_id, started_at, id) holds. Other keys are expressions no index holds (JSON paths, summary
 * fields, feedback, expanded refs), so comparing with a position costs as much as counting or more (a
 * feedback field's, five times as much); their values change while a list is read (a call ends, is
 * renamed, gets feedback); and they would have to be read back and bound in their own types.
 */
export function seeksAfter(sortBy?: readonly SortBy[] | null): boolean {
  return (sortBy ?? []).every((item) => SEEKABLE.has(item.field));
}

/** Where a call sits in a list ordered by started_at and id: its id, and its start time as ISO text (microseconds, UTC). */
export interface CallPosition {
  id: string;
  startedAt: string;
}

/**
 * The calls that come after `position` in a list of this order (one seeksAfter allows): a page of the
 * list that starts there, without counting past every call before it as OFFSET does. Each key compares
 * with the position's value in the key's own type and collation; id ends the order, so the rows after the
 * position are exactly the list's rest. The first key alone bounds the rows too, which the index on
 * (project_id, started_at, id) seeks to when started_at is that key.
 */
export function callsAfter(args: { position: CallPosition; sortBy?: readonly SortBy[] | null }): RawBuilder<SqlBool> {
  const values: Record<string, RawBuilder<unknown>> = { started_at: sql`${args.position.startedAt}::timestamptz`, id: sql`${args.position.id}::text` };
  const keys = sortKeys(args.sortBy).map((key) => {
    // Callers check seeksAfter: every key is on started_at or id.
    if (!key.column || !(key.column.field in values)) throw new Error('callsAfter: a key other than started_at and id');
    return { ...key, value: key.column.order(values[key.column.field]) };
  });
  const op = (direction: string, strict: boolean) => sql.raw((direction === 'asc' ? '>' : '<') + (strict ? '' : '='));
  const terms = keys.map(({ expr, direction, value }, i) =>
    sql.join([...keys.slice(0, i).map((before) => sql`${before.expr} = ${before.value}`), sql`${expr} ${op(direction, true)} ${value}`], sql` and `),
  );
  const [first] = keys;
  return sql<SqlBool>`${first.expr} ${op(first.direction, false)} ${first.value} and ((${sql.join(terms, sql`) or (`)}))`;
}
