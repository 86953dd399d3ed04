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
}

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
    if (NEVER_NULL.has(field) && value.kind === 'typed') return [{ expr: value.type === 'text' ? byteOrder(value.sql) : value.sql, direction, nullable: false }];
    return sortExprs(value).map((expr) => ({ expr, direction, nullable: true }));
  });
  if (!items.some((item) => item.field === 'id')) keys.push({ expr: col('id'), direction: 'asc', nullable: false });
  return keys;
}

/** The ORDER BY list of a calls list (sortKeys). */
export function callsOrderBy(sortBy?: readonly SortBy[] | null, expandColumns?: readonly string[] | null): RawBuilder<unknown> {
  return sql.join(sortKeys(sortBy, expandColumns).map(({ expr, direction, nullable }) => sql`${expr} ${sql.raw(direction)}${sql.raw(nullable ? ' nulls last' : '')}`));
}

/** The sort fields pages may start after a call in (callsAfter): columns a call keeps once visible, never null. */
const SEEKABLE = new Set(['started_at', 'id']);

/**
 * Whether a list in this order may start after a call (callsAfter) rather than count OFFSET calls: when it
 * sorts by started_at and id only (weave's SDK and the web UI do), which an index holds and a call keeps
 * once it is visible. Other keys change while a page is read (a call ends, is renamed, gets feedback), so
 * a page after a call whose key moved would skip or repeat calls; and no index holds them, so a
 * comparison with the call's keys costs more than counting (a feedback field's, five times as much).
 */
export function seeksAfter(sortBy?: readonly SortBy[] | null): boolean {
  return (sortBy ?? []).every((item) => SEEKABLE.has(item.field));
}

/**
 * The calls that come after the call `anchorId` in a list of this order (one seeksAfter allows): a page
 * of the list that starts there, without counting past every call before it as OFFSET does. Each key
 * compares with its value on the anchor's row, read by primary key in a subquery (the inner `trace_calls`
 * is the anchor's), in the key's own type and collation. The anchor's row must exist (calls are only
 * ever soft-deleted). id ends the order, so the rows after the anchor are exactly the list's rest.
 */
export function callsAfter(args: { projectId: string; anchorId: string; sortBy?: readonly SortBy[] | null }): RawBuilder<SqlBool> {
  if (!seeksAfter(args.sortBy)) throw new Error('callsAfter: the order has keys other than started_at and id');
  const keys = sortKeys(args.sortBy);
  const anchor = (expr: RawBuilder<unknown>) => sql`(select ${expr} from ${sql.table(CALLS_TABLE)} where ${col('project_id')} = ${args.projectId} and ${col('id')} = ${args.anchorId})`;
  const terms: RawBuilder<unknown>[] = [];
  const equal: RawBuilder<unknown>[] = [];
  for (const { expr, direction } of keys) {
    const value = anchor(expr);
    const after = sql`${expr} ${sql.raw(direction === 'asc' ? '>' : '<')} ${value}`;
    terms.push(equal.length ? sql`(${sql.join([...equal, after], sql` and `)})` : after);
    equal.push(sql`${expr} = ${value}`);
  }
  // The same bound on the first key alone, which an index on it can seek to.
  const [first] = keys;
  return sql<SqlBool>`${first.expr} ${sql.raw(first.direction === 'asc' ? '>=' : '<=')} ${anchor(first.expr)} and (${sql.join(terms, sql` or `)})`;
}
