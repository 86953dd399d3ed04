import { sql, type RawBuilder } from 'kysely';
import { callsAfter, callsOrderBy, callsWhere, type CallPosition } from '../query/calls.js';
import type { CallsFilter, Query, SortBy } from '../query/schema.js';
import { isoText, jsonbText, jsonText, toInt, type Executor } from './common.js';

/** trace_calls: one row per call, merged from its start and its end in either order (reference §3.6). */

export interface CallStartWrite {
  traceId: string;
  parentId: string | null;
  opName: string;
  displayName: string | null;
  threadId: string | null;
  turnId: string | null;
  startedAt: string;
  attributes: string;
  inputs: string;
  inputRefs: string[];
  /** Whether attributes, inputs or otelDump hold numbers a double would change (the row's exact_numbers). */
  exactNumbers: boolean;
  otelDump: string | null;
  wbUserId: string;
  wbRunId: string | null;
  wbRunStep: number | null;
}

export interface CallEndWrite {
  endedAt: string;
  exception: string | null;
  output: string;
  outputRefs: string[];
  summary: string;
  /** Whether output or summary hold numbers a double would change. */
  exactNumbers: boolean;
  wbRunStepEnd: number | null;
  displayName: string | null;
}

/** A call's start, end or both, with JSON payloads already serialised. */
export interface CallWrite {
  projectId: string;
  id: string;
  start?: CallStartWrite;
  end?: CallEndWrite;
}

const START_COLUMNS = ['trace_id', 'parent_id', 'op_name', 'thread_id', 'turn_id', 'started_at', 'attributes', 'inputs', 'input_refs', 'otel_dump', 'wb_run_id', 'wb_run_step'];
const END_COLUMNS = ['ended_at', 'exception', 'output', 'output_refs', 'summary', 'wb_run_step_end'];

/** Rows per statement: 20 binds a row stays far below PostgreSQL's 65,535 binds per statement. */
const ROWS_PER_STATEMENT = 1000;

/**
 * Writes starts and ends as multi-row upserts. Each id appears at most once (the service merges a
 * batch by id first). A start fills the start columns and an end the end columns, whichever arrives
 * first; repeats overwrite their own half only. An existing display name wins over the one a start or
 * end carries, so a /call/update that raced ahead of the start is kept.
 */
export async function upsertCalls(db: Executor, calls: readonly CallWrite[]): Promise<void> {
  for (let i = 0; i < calls.length; i += ROWS_PER_STATEMENT) {
    const chunk = calls.slice(i, i + ROWS_PER_STATEMENT);
    await db
      .insertInto('trace_calls')
      .values(chunk.map(toRow))
      .onConflict((oc) =>
        oc.columns(['project_id', 'id']).doUpdateSet(() => {
          const set: Record<string, RawBuilder<unknown>> = {};
          for (const column of START_COLUMNS) set[column] = keepUnless('started_at', column);
          for (const column of END_COLUMNS) set[column] = keepUnless('ended_at', column);
          set.display_name = sql`coalesce(trace_calls.display_name, excluded.display_name)`;
          set.wb_user_id = sql`coalesce(trace_calls.wb_user_id, excluded.wb_user_id)`;
          // Either half may hold them; once set it stays (a false true only costs reading the row as text).
          set.exact_numbers = sql`trace_calls.exact_numbers or excluded.exact_numbers`;
          return set;
        }),
      )
      .execute();
  }
}

/** A call whose start and end are both known (an OTel span): a whole trace_calls row, JSON columns as values. */
export interface CompleteCallRow {
  project_id: string;
  id: string;
  trace_id: string;
  parent_id: string | null;
  op_name: string;
  display_name: string | null;
  thread_id: string | null;
  turn_id: string | null;
  started_at: string;
  attributes: unknown;
  inputs: unknown;
  input_refs: readonly string[];
  otel_dump: unknown;
  wb_user_id: string;
  wb_run_id: string | null;
  wb_run_step: number | null;
  ended_at: string;
  exception: string | null;
  output: unknown;
  output_refs: readonly string[];
  summary: unknown;
  wb_run_step_end: number | null;
  /** Whether a payload or otel_dump holds numbers a double would change; absent is false. */
  exact_numbers?: boolean;
}

const COMPLETE_COLUMNS: [keyof CompleteCallRow, string][] = [
  ['project_id', 'text'], ['id', 'text'], ['trace_id', 'text'], ['parent_id', 'text'], ['op_name', 'text'], ['display_name', 'text'],
  ['thread_id', 'text'], ['turn_id', 'text'], ['started_at', 'timestamptz'], ['attributes', 'jsonb'], ['inputs', 'jsonb'], ['input_refs', 'text[]'],
  ['otel_dump', 'json'], ['wb_user_id', 'text'], ['wb_run_id', 'text'], ['wb_run_step', 'bigint'], ['ended_at', 'timestamptz'], ['exception', 'text'],
  ['output', 'jsonb'], ['output_refs', 'text[]'], ['summary', 'jsonb'], ['wb_run_step_end', 'bigint'], ['exact_numbers', 'boolean'],
];
const COMPLETE_INSERT = sql.raw(COMPLETE_COLUMNS.map(([name]) => name).join(', '));
// A JSON null in `output` is the JSON value null (as upsertCalls stores it), not SQL NULL; a row without
// exact_numbers has none.
const COMPLETE_DEFAULTS: Record<string, string> = { output: `'null'::jsonb`, exact_numbers: 'false' };
const COMPLETE_SELECT = sql.raw(COMPLETE_COLUMNS.map(([name]) => (name in COMPLETE_DEFAULTS ? `coalesce(r.${name}, ${COMPLETE_DEFAULTS[name]})` : `r.${name}`)).join(', '));
const COMPLETE_RECORD = sql.raw(COMPLETE_COLUMNS.map(([name, type]) => `${name} ${type}`).join(', '));
// Both halves are present, so every start and end column takes the incoming value: the same result
// as upsertCalls' merge for a row carrying a start and an end. Every payload is replaced, so the flag too.
const COMPLETE_SET = sql.raw(
  [...START_COLUMNS, ...END_COLUMNS, 'exact_numbers']
    .map((column) => `${column} = excluded.${column}`)
    .concat(['display_name = coalesce(trace_calls.display_name, excluded.display_name)', 'wb_user_id = coalesce(trace_calls.wb_user_id, excluded.wb_user_id)'])
    .join(', '),
);

/**
 * Writes complete calls as one statement: the rows arrive as one JSON array (`rowsJson`, the
 * CompleteCallRow objects serialised and cleaned) and are expanded by json_to_recordset, so a batch is
 * one bind parameter rather than 22 a row. Ids must be unique within the batch. Same conflict rule as
 * upsertCalls for a call whose start and end are both given.
 */
export async function upsertCompleteCalls(db: Executor, rowsJson: string): Promise<void> {
  await sql`insert into trace_calls (${COMPLETE_INSERT})
    select ${COMPLETE_SELECT} from json_to_recordset(${rowsJson}::json) as r(${COMPLETE_RECORD})
    on conflict (project_id, id) do update set ${COMPLETE_SET}`.execute(db);
}

/** The incoming value of `column` when the incoming row carries that half of the call, else the stored one. */
function keepUnless(marker: string, column: string): RawBuilder<unknown> {
  return sql`case when excluded.${sql.raw(marker)} is not null then excluded.${sql.raw(column)} else trace_calls.${sql.raw(column)} end`;
}

function toRow(call: CallWrite) {
  const { start, end } = call;
  return {
    project_id: call.projectId,
    id: call.id,
    trace_id: start?.traceId ?? null,
    parent_id: start?.parentId ?? null,
    op_name: start?.opName ?? null,
    display_name: start?.displayName ?? end?.displayName ?? null,
    thread_id: start?.threadId ?? null,
    turn_id: start?.turnId ?? null,
    started_at: start?.startedAt ?? null,
    attributes: jsonbText(start?.attributes ?? null),
    inputs: jsonbText(start?.inputs ?? null),
    input_refs: start?.inputRefs ?? [],
    otel_dump: jsonText(start?.otelDump ?? null),
    wb_user_id: start?.wbUserId ?? null,
    wb_run_id: start?.wbRunId ?? null,
    wb_run_step: start?.wbRunStep ?? null,
    ended_at: end?.endedAt ?? null,
    exception: end?.exception ?? null,
    output: jsonbText(end?.output ?? null),
    output_refs: end?.outputRefs ?? [],
    summary: jsonbText(end?.summary ?? null),
    wb_run_step_end: end?.wbRunStepEnd ?? null,
    // Only where true: kysely writes DEFAULT (false) for a row without it, and a batch without any keeps
    // the statement it had before the column existed.
    ...(start?.exactNumbers || end?.exactNumbers ? { exact_numbers: true } : {}),
  } as never;
}

/** Sets the display name, creating the row if the call's start has not arrived yet. */
export async function setDisplayName(db: Executor, args: { projectId: string; id: string; displayName: string }): Promise<void> {
  await db
    .insertInto('trace_calls')
    .values({ project_id: args.projectId, id: args.id, display_name: args.displayName } as never)
    .onConflict((oc) => oc.columns(['project_id', 'id']).doUpdateSet({ display_name: args.displayName }))
    .execute();
}

/** Soft-deletes the calls and all their descendants (children found by parent_id within the trace). */
export async function deleteCallsCascade(db: Executor, args: { projectId: string; ids: readonly string[] }): Promise<number> {
  if (args.ids.length === 0) return 0;
  const { projectId } = args;
  const result = await sql`
    with recursive doomed(id, trace_id) as (
      select id, trace_id from trace_calls
      where project_id = ${projectId} and id in (${sql.join(args.ids)}) and deleted_at is null and started_at is not null
      union
      select c.id, c.trace_id from trace_calls c join doomed d
        on c.project_id = ${projectId} and c.parent_id = d.id and c.trace_id = d.trace_id
      where c.deleted_at is null
    )
    update trace_calls set deleted_at = now()
    where project_id = ${projectId} and id in (select id from doomed) and deleted_at is null`.execute(db);
  return toInt(result.numAffectedRows);
}

/** What a calls read selects: the payload columns only when asked for (list queries stay narrow). */
export interface CallSelection {
  /** Top-level columns to read; undefined: all. */
  columns?: ReadonlySet<string>;
  storageSize?: boolean;
  totalStorageSize?: boolean;
}

export interface CallsListArgs {
  projectId: string;
  filter?: CallsFilter | null;
  query?: Query | null;
  sortBy?: readonly SortBy[] | null;
  /** expand_columns: filters and sorts below them read through refs. */
  expandColumns?: readonly string[] | null;
  limit?: number | null;
  offset?: number | null;
  /** Where the list starts, after a call (callsAfter, for an order seeksAfter allows), in place of counting `offset` calls. */
  after?: CallPosition | null;
  selection: CallSelection;
}

/**
 * A row as read: timestamps as ISO text, JSON columns parsed by the driver, except the payloads
 * (PAYLOAD_COLUMNS) of a row with `exact_numbers`: those come as their JSON text in `<column>_text`
 * (the column itself null), for `parsePayloadText` to keep their exact numbers.
 */
export type CallRow = Record<string, unknown>;

const TEXT_COLUMNS = ['id', 'project_id', 'op_name', 'display_name', 'trace_id', 'parent_id', 'thread_id', 'turn_id', 'exception', 'wb_user_id', 'wb_run_id', 'wb_run_step', 'wb_run_step_end'];
const TIME_COLUMNS = ['started_at', 'ended_at', 'deleted_at'];
export const PAYLOAD_COLUMNS = ['attributes', 'inputs', 'output', 'summary', 'otel_dump'] as const;
const ALWAYS = new Set(['id', 'project_id', 'trace_id', 'op_name', 'started_at']);

/** The stored size of a call's payloads (attributes, inputs, output, summary) as JSON text, in bytes. */
export const size = (alias: string) =>
  sql`(coalesce(octet_length(${sql.ref(`${alias}.attributes`)}::text), 0) + coalesce(octet_length(${sql.ref(`${alias}.inputs`)}::text), 0)
    + coalesce(octet_length(${sql.ref(`${alias}.output`)}::text), 0) + coalesce(octet_length(${sql.ref(`${alias}.summary`)}::text), 0))`;

function selectList(selection: CallSelection): RawBuilder<unknown> {
  const wanted = (column: string) => !selection.columns || ALWAYS.has(column) || selection.columns.has(column);
  const items: RawBuilder<unknown>[] = [];
  for (const column of TEXT_COLUMNS) if (wanted(column)) items.push(sql`trace_calls.${sql.raw(column)}`);
  for (const column of TIME_COLUMNS) if (wanted(column)) items.push(sql`${isoText(sql.ref(`trace_calls.${column}`))} as ${sql.raw(column)}`);
  const payloads = PAYLOAD_COLUMNS.filter(wanted);
  for (const column of payloads) {
    const ref = sql.ref(`trace_calls.${column}`);
    items.push(sql`case when trace_calls.exact_numbers then null else ${ref} end as ${sql.raw(column)}`);
    items.push(sql`case when trace_calls.exact_numbers then ${ref}::text end as ${sql.raw(`${column}_text`)}`);
  }
  if (payloads.length > 0) items.push(sql`trace_calls.exact_numbers`);
  items.push(sql`floor(extract(epoch from (trace_calls.ended_at - trace_calls.started_at)) * 1000) as latency_ms`);
  if (selection.storageSize) items.push(sql`${size('trace_calls')} as storage_size_bytes`);
  if (selection.totalStorageSize) {
    items.push(sql`case when trace_calls.parent_id is null then (select sum(${size('t')}) from trace_calls t
      where t.project_id = trace_calls.project_id and t.trace_id = trace_calls.trace_id and t.deleted_at is null) end as total_storage_size_bytes`);
  }
  return sql.join(items);
}

/** A window of a calls list: `limit` calls from `offset` on, counted from after `after` (else the list's own `after`). */
export interface CallsWindow {
  limit: number;
  offset: number;
  after?: CallPosition | null;
}

/** The calls of the list, those after `after` when it is given. */
function listWhere(args: CallsListArgs, after: CallPosition | null | undefined): RawBuilder<unknown> {
  const { projectId, filter, query, expandColumns } = args;
  const where = callsWhere({ projectId, filter, query, expandColumns });
  return after == null ? where : sql`${where} and ${callsAfter({ position: after, sortBy: args.sortBy })}`;
}

/** The SELECT of a calls list, ready to run whole or through a cursor. */
export function callsListQuery(args: CallsListArgs): RawBuilder<CallRow> {
  const where = listWhere(args, args.after);
  const order = callsOrderBy(args.sortBy, args.expandColumns);
  return sql<CallRow>`select ${selectList(args.selection)} from trace_calls where ${where} order by ${order}
    ${args.limit != null ? sql`limit ${args.limit}` : sql``} ${args.offset ? sql`offset ${args.offset}` : sql``}`;
}

/**
 * One window of a calls list, for reading a long result in steps without a cursor: the CTE finds the
 * window's keys (and their places in it) reading only the sort keys, and the payloads of those rows only
 * are then read by primary key (OFFSET would otherwise build every skipped row in full).
 *
 * The shape keeps that plan whatever the statistics say. A project the statistics do not know yet
 * (created since the last ANALYZE) is estimated at one row, and `id in (subquery)` was then planned as a
 * nested loop over the project's calls that ran the subquery again for each (4.6-7.8 s for 50 rows of a
 * 20,000-call project on PGlite, docs/benchmarks.md). So the CTE runs once (MATERIALIZED), the payloads are joined on the
 * CTE's own project_id, a join key estimated from the column's distinct values rather than from the
 * unknown constant (with the constant, the planner scanned the project's calls, or another index on
 * project_id, once per window row), and the rows are ordered by their place in the window.
 */
export function callsWindowQuery(args: CallsListArgs, window: CallsWindow): RawBuilder<CallRow> {
  const where = listWhere(args, window.after ?? args.after);
  const order = callsOrderBy(args.sortBy, args.expandColumns);
  return sql<CallRow>`with calls_window as materialized (
      select trace_calls.project_id, trace_calls.id, row_number() over (order by ${order}) as position from trace_calls
      where ${where} order by ${order} limit ${window.limit} offset ${window.offset})
    select ${selectList(args.selection)} from calls_window
    join trace_calls on trace_calls.project_id = calls_window.project_id and trace_calls.id = calls_window.id
    order by calls_window.position`;
}

export async function listCalls(db: Executor, args: CallsListArgs): Promise<CallRow[]> {
  return (await callsListQuery(args).execute(db)).rows;
}

export async function readCall(db: Executor, args: { projectId: string; id: string; selection: CallSelection }): Promise<CallRow | undefined> {
  const rows = await listCalls(db, { projectId: args.projectId, filter: { call_ids: [args.id] }, selection: args.selection, limit: 1 });
  return rows[0];
}

/** How many calls match; with `limit`, counting stops after limit + 1 (the cheap "any more?" probe). */
export async function countCalls(
  db: Executor,
  args: {
    projectId: string;
    filter?: CallsFilter | null;
    query?: Query | null;
    expandColumns?: readonly string[] | null;
    limit?: number | null;
    totalStorageSize?: boolean;
  },
): Promise<{ count: number; totalStorageSize?: number }> {
  const where = callsWhere(args);
  if (args.limit != null) {
    const { rows } = await sql<{ n: unknown }>`select count(*) as n from (select 1 from trace_calls where ${where} limit ${args.limit + 1}) m`.execute(db);
    return { count: toInt(rows[0]?.n) };
  }
  const storage = args.totalStorageSize
    ? sql`, (select sum(${size('t')}) from trace_calls t where t.project_id = ${args.projectId} and t.deleted_at is null
        and t.trace_id in (select trace_id from trace_calls where ${where} and trace_calls.parent_id is null)) as storage`
    : sql``;
  const { rows } = await sql<{ n: unknown; storage?: unknown }>`select count(*) as n ${storage} from trace_calls where ${where}`.execute(db);
  return { count: toInt(rows[0]?.n), totalStorageSize: args.totalStorageSize ? toInt(rows[0]?.storage) : undefined };
}
