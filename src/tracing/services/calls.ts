import { channel } from 'node:diagnostics_channel';
import { usernamesByIds } from '../../auth/repository.js';
import { InvalidRequestError } from '../../errors.js';
import { hasMarkedNumbers, unmarkNumbers } from '../../http/exact-numbers.js';
import { holdsExactNumbers, isJsonObject, markHoldsExactNumbers, numberOf, parsePayloadText, payloadJsonText } from '../exact-numbers.js';
import { uuidv7 } from '../ids.js';
import { seeksAfter, type CallPosition } from '../query/calls.js';
import { splitFieldPath } from '../query/expr.js';
import { extractRefs, isWeaveRef, REF_SCHEME } from '../refs.js';
import * as repo from '../repositories/calls.js';
import { mapJsonbErrors, type Executor } from '../repositories/common.js';
import type { CallsQueryBody, EndedCall, StartedCall } from '../schemas/calls.js';
import { answerTooLarge, TRACING_LIMITS } from '../schemas/common.js';
import { readInBatches } from './batches.js';
import { listIdentity } from './call-pages.js';
import type { TracingDeps } from './deps.js';
import { addCosts } from './costs.js';
import { feedbackByCall } from './feedback.js';
import { expandRefs } from './refs.js';
import { cleanJsonText, cleanNullable, cleanString } from '../sanitize.js';

/** Calls: start/end ingest, reads, queries, streaming, stats, update and delete (reference §2.2, §3.6, §3.7). */

export const MAX_DELETE_IDS = 1000;

/**
 * The most rows read per round trip when streaming (a cursor FETCH on a server, a window on PGlite), as
 * weave's servers stream at most 500 calls a batch, starting at 50 (INITIAL_CALLS_STREAM_BATCH_SIZE).
 */
export const STREAM_BATCH_SIZE = 500;
const FIRST_BATCH_ROWS = 50;
/** About how many characters of JSON a batch of calls is sized to hold, judged by the batch before. */
const BATCH_TARGET_CHARS = 8 * 1024 * 1024;

/**
 * Published once per batch a calls stream reads from the database (`{ rows }`), so that tests and
 * operators can see that a stream is read in steps rather than whole.
 */
export const streamBatchChannel = channel('trainyard:tracing:calls-stream-batch');

export type UpsertItem = { mode: 'start'; start: StartedCall } | { mode: 'end'; end: EndedCall };

/**
 * Applies a batch of starts and ends in one transaction of multi-row statements: all or nothing.
 * Items for the same call are merged first (a start and its end become one row).
 */
export async function upsertBatch(deps: TracingDeps, args: { userId: string; items: readonly UpsertItem[] }): Promise<{ id: string; trace_id?: string }[]> {
  const merged = new Map<string, repo.CallWrite>();
  const results: { id: string; trace_id?: string }[] = [];
  for (const item of args.items) {
    if (item.mode === 'start') {
      const write = startWrite(item.start, args.userId);
      const key = `${item.start.project_id}\u0000${write.id}`;
      const existing = merged.get(key);
      merged.set(key, { ...(existing ?? { projectId: item.start.project_id, id: write.id }), start: write.start });
      results.push({ id: write.id, trace_id: write.start.traceId });
    } else {
      const end = endWrite(item.end);
      const id = cleanString(item.end.id);
      const key = `${item.end.project_id}\u0000${id}`;
      const existing = merged.get(key);
      merged.set(key, { ...(existing ?? { projectId: item.end.project_id, id }), end });
      results.push({ id });
    }
  }
  const calls = [...merged.values()];
  await mapJsonbErrors(() => deps.db.transaction().execute((trx) => repo.upsertCalls(trx, calls)));
  return results;
}

const NO_REFS: readonly string[] = Object.freeze([]);

/** Rows per statement of upsertCompleteCalls; a longer batch is several statements in one transaction. */
const COMPLETE_ROWS_PER_STATEMENT = 2000;

/**
 * Stores calls whose start and end are both known (OTel spans) as whole rows: the same stored result
 * as upsertBatch with a start and an end per call (a later repeat of an id wins; payloads cleaned the
 * same way; wb_user_id stamped from the key's user), without the merge. All or nothing.
 */
export async function upsertCompleteCalls(deps: TracingDeps, args: { userId: string; calls: readonly CompleteCall[] }): Promise<void> {
  const rows: repo.CompleteCallRow[] = [];
  const seen = new Map<string, number>();
  for (const call of args.calls) {
    const output = call.output === undefined ? null : call.output;
    const row: repo.CompleteCallRow = {
      project_id: call.project_id,
      id: call.id,
      trace_id: call.trace_id,
      parent_id: call.parent_id,
      op_name: call.op_name,
      display_name: call.display_name,
      thread_id: call.thread_id,
      turn_id: call.turn_id,
      started_at: call.started_at,
      attributes: call.attributes,
      inputs: call.inputs,
      input_refs: NO_REFS,
      otel_dump: call.otel_dump,
      wb_user_id: args.userId,
      wb_run_id: call.wb_run_id,
      wb_run_step: call.wb_run_step,
      ended_at: call.ended_at,
      exception: call.exception,
      output,
      output_refs: NO_REFS,
      summary: call.summary,
      wb_run_step_end: call.wb_run_step_end,
    };
    const key = `${call.project_id}\u0000${call.id}`;
    const at = seen.get(key);
    if (at === undefined) {
      seen.set(key, rows.length);
      rows.push(row);
    } else rows[at] = row;
  }
  // One JSON text per statement. JSON.stringify writes U+0000 and lone surrogates as \u escapes, so
  // cleanJsonText finds them in the whole text at once; only then does it clean every string (ids
  // and text columns included, as cleanString does one by one in upsertBatch).
  const texts: string[] = [];
  for (let i = 0; i < rows.length; i += COMPLETE_ROWS_PER_STATEMENT) {
    const chunk = rows.slice(i, i + COMPLETE_ROWS_PER_STATEMENT);
    texts.push(cleanJsonText(`[${chunk.map(completeRowJson).join(',')}]`));
  }
  if (texts.length === 1) await mapJsonbErrors(() => repo.upsertCompleteCalls(deps.db, texts[0]));
  else if (texts.length > 1) {
    await mapJsonbErrors(() =>
      deps.db.transaction().execute(async (trx) => {
        for (const text of texts) await repo.upsertCompleteCalls(trx, text);
      }),
    );
  }
}

/**
 * A complete row's JSON text. Refs are strings starting with weave:///, written as such in JSON text: a
 * row without that text has none, and its ref columns stay empty without walking its payloads. Exact
 * numbers (an OTLP double with a whole value, an int64 beyond 2^53) are written as their literals, and
 * flag the row.
 */
function completeRowJson(row: repo.CompleteCallRow): string {
  let text = JSON.stringify(row);
  if (text.includes(REF_SCHEME)) {
    row.input_refs = extractRefs(row.inputs);
    row.output_refs = extractRefs(row.output);
    text = JSON.stringify(row);
  }
  if (!hasMarkedNumbers(text)) return text;
  // The flag, as JSON.stringify would write it last in the object, without writing the row again.
  return unmarkNumbers(`${text.slice(0, -1)},"exact_numbers":true}`);
}

/** A complete call as upsertCompleteCalls takes it: a trace_calls row less wb_user_id and the ref columns. */
export type CompleteCall = Omit<repo.CompleteCallRow, 'wb_user_id' | 'input_refs' | 'output_refs'>;

/**
 * Call payloads are stored with U+0000 and lone surrogates replaced by U+FFFD (src/tracing/sanitize.ts):
 * refusing them would fail a whole SDK batch, and the JS SDK gives up on a process after ten.
 */
function startWrite(start: StartedCall, userId: string): { id: string; start: repo.CallStartWrite } {
  const id = start.id == null ? uuidv7() : cleanString(start.id);
  const attributes = payloadJsonText(start.attributes);
  const inputs = payloadJsonText(start.inputs);
  const otelDump = start.otel_dump ? payloadJsonText(start.otel_dump) : undefined;
  return {
    id,
    start: {
      traceId: start.trace_id == null ? uuidv7() : cleanString(start.trace_id),
      parentId: cleanNullable(start.parent_id ?? null),
      opName: cleanString(start.op_name),
      displayName: cleanNullable(start.display_name ?? null),
      threadId: cleanNullable(start.thread_id ?? null),
      turnId: cleanNullable(start.turn_id ?? null),
      startedAt: start.started_at,
      attributes: cleanJsonText(attributes.text),
      inputs: cleanJsonText(inputs.text),
      exactNumbers: attributes.exact || inputs.exact || Boolean(otelDump?.exact),
      inputRefs: extractRefs(start.inputs).map(cleanString),
      otelDump: otelDump ? cleanJsonText(otelDump.text) : null,
      // Stamped from the key's user: a client-sent wb_user_id is not trusted (reference §1.2).
      wbUserId: userId,
      wbRunId: cleanNullable(start.wb_run_id ?? null),
      wbRunStep: start.wb_run_step ?? null,
    },
  };
}

function endWrite(end: EndedCall): repo.CallEndWrite {
  const output = end.output === undefined ? null : end.output;
  const outputJson = payloadJsonText(output);
  const summary = payloadJsonText(end.summary);
  return {
    endedAt: end.ended_at,
    exception: cleanNullable(end.exception ?? null),
    output: cleanJsonText(outputJson.text),
    outputRefs: extractRefs(output).map(cleanString),
    summary: cleanJsonText(summary.text),
    exactNumbers: outputJson.exact || summary.exact,
    wbRunStepEnd: end.wb_run_step_end ?? null,
    displayName: cleanNullable(end.display_name ?? null),
  };
}

export async function updateCall(deps: TracingDeps, args: { projectId: string; id: string; displayName?: string | null }): Promise<void> {
  if (args.displayName == null) {
    throw new InvalidRequestError('Nothing to update: send display_name (the only updatable field; "" removes the name).', { code: 'invalid_update' });
  }
  const displayName = cleanString(args.displayName);
  await mapJsonbErrors(() => repo.setDisplayName(deps.db, { projectId: args.projectId, id: cleanString(args.id), displayName }));
}

export async function deleteCalls(deps: TracingDeps, args: { projectId: string; ids: readonly string[] }): Promise<number> {
  if (args.ids.length > MAX_DELETE_IDS) {
    throw new InvalidRequestError(`Cannot delete more than ${MAX_DELETE_IDS} calls at once (got ${args.ids.length}); split the request.`, { code: 'too_many_ids' });
  }
  return deps.db.transaction().execute((trx) => repo.deleteCallsCascade(trx, args));
}

export async function readCall(
  deps: TracingDeps,
  args: { projectId: string; id: string; storageSize?: boolean; totalStorageSize?: boolean; costs?: boolean },
): Promise<Record<string, unknown> | null> {
  const selection = { storageSize: Boolean(args.storageSize), totalStorageSize: Boolean(args.totalStorageSize) };
  const row = await repo.readCall(deps.db, { projectId: args.projectId, id: args.id, selection });
  if (!row) return null;
  const call = toCallSchema(row, selection);
  if (args.costs) await addCosts(deps, args.projectId, [call]);
  return call;
}

export async function queryStats(
  deps: TracingDeps,
  args: {
    projectId: string;
    filter?: CallsQueryBody['filter'];
    query?: CallsQueryBody['query'];
    expandColumns?: readonly string[] | null;
    limit?: number | null;
    totalStorageSize?: boolean;
  },
): Promise<{ count: number; has_more?: boolean; total_storage_size_bytes?: number }> {
  const result = await repo.countCalls(deps.db, args);
  if (args.limit != null) return { count: Math.min(result.count, args.limit), has_more: result.count > args.limit };
  return args.totalStorageSize ? { count: result.count, total_storage_size_bytes: result.totalStorageSize } : { count: result.count };
}

/** The JSON columns weave also accepts under their storage names (`output_dump` is `output`). */
const DUMP_COLUMNS = new Set(['inputs_dump', 'output_dump', 'attributes_dump', 'summary_dump']);

/** The call column a `columns` entry selects: its first path segment, `<column>_dump` read as `<column>`. */
function columnOf(entry: string): string {
  const head = entry.split('.')[0];
  return DUMP_COLUMNS.has(head) ? head.slice(0, -'_dump'.length) : head;
}

/** A calls query as the repository and the row mapper need it. */
function listArgs(projectId: string, body: Omit<CallsQueryBody, 'project_id'>): repo.CallsListArgs {
  let columns: Set<string> | undefined;
  if (body.columns?.length) {
    columns = new Set(body.columns.map(columnOf));
    for (const path of body.expand_columns ?? []) columns.add(path.split('.')[0]);
    // weave returns the summary that carries the costs even when `columns` leaves it out.
    if (body.include_costs) columns.add('summary');
    if (body.include_usernames) columns.add('wb_user_id');
    // The derived summary.weave needs these (reference §3.7).
    if (columns.has('summary')) for (const c of ['ended_at', 'exception', 'display_name']) columns.add(c);
  }
  return {
    projectId,
    filter: body.filter,
    query: body.query,
    sortBy: body.sort_by,
    expandColumns: body.expand_columns,
    limit: body.limit,
    offset: body.offset,
    selection: { columns, storageSize: Boolean(body.include_storage_size), totalStorageSize: Boolean(body.include_total_storage_size) },
  };
}

/**
 * `/calls/query`: the answer's JSON text, `{"calls": [...]}`, read in the stream's batches (callTexts) so
 * that a query past TRACING_LIMITS.answerBytes stops there with a 400 (answerTooLarge) instead of building
 * an answer no string can hold. An answer of one call is never refused.
 */
export async function queryCallsJson(deps: TracingDeps, projectId: string, body: Omit<CallsQueryBody, 'project_id'>): Promise<string> {
  const texts: string[] = [];
  let bytes = 0;
  for await (const batch of callTexts(deps, projectId, body)) {
    for (const text of batch) {
      bytes += Buffer.byteLength(text) + 1;
      if (bytes > TRACING_LIMITS.answerBytes && texts.length > 0) {
        throw answerTooLarge(
          'calls of this query',
          '/calls/query',
          texts.length,
          'Read them with /calls/stream_query (JSON Lines, any number of calls), or page with a smaller limit and offset, or select fewer columns.',
        );
      }
      texts.push(text);
    }
  }
  return `{"calls":[${texts.join(',')}]}`;
}

/** Where a row sits in a list ordered by started_at and id. */
const positionOf = (row: repo.CallRow): CallPosition => ({ id: row.id as string, startedAt: row.started_at as string });

/**
 * The list's arguments for a page that starts after where the last call of an earlier page of the same
 * list was, when one ended at this page's offset (CallPageEnds) and the order allows it (seeksAfter); and
 * what to record of where this page ends.
 */
function startOfPage(deps: TracingDeps, args: repo.CallsListArgs): { args: repo.CallsListArgs; ended(count: number, last: repo.CallRow): void } {
  const pages = deps.callPages;
  if (!pages || !seeksAfter(args.sortBy)) return { args, ended: () => {} };
  const list = listIdentity(args);
  const offset = args.offset ?? 0;
  const ended = (count: number, last: repo.CallRow) => pages.set(list, offset + count, positionOf(last));
  const after = offset > 0 ? pages.get(list, offset) : undefined;
  return { args: after ? { ...args, offset: null, after } : args, ended };
}

/**
 * The rows as CallSchemas with expanded columns, costs and feedback. `deps.db` may be a stream's
 * transaction: the lookups then run on the connection that holds the cursor, so that a stream never
 * waits on the pool for a second connection while holding one (N such streams would deadlock a pool of N).
 */
async function finish(
  deps: TracingDeps,
  projectId: string,
  rows: repo.CallRow[],
  args: repo.CallsListArgs,
  body: Omit<CallsQueryBody, 'project_id'>,
): Promise<Record<string, unknown>[]> {
  const calls = rows.map((row) => toCallSchema(row, args.selection));
  // return_expanded_column_values: false keeps the refs as strings (they still steer filters and sorts).
  if (body.expand_columns?.length && body.return_expanded_column_values !== false) await expandCallColumns(deps.db, projectId, calls, body.expand_columns);
  const withSummary = calls.filter((call) => call.summary !== null && typeof call.summary === 'object');
  if (body.include_costs && withSummary.length) await addCosts(deps, projectId, withSummary);
  if (body.include_usernames) await addUsernames(deps, calls);
  if (body.include_feedback && withSummary.length) {
    // summary.weave.feedback: the feedback whose weave_ref is the call's ref (reference §3.6).
    const byCall = await feedbackByCall(deps, projectId, withSummary.map((call) => call.id as string));
    for (const call of withSummary) {
      const summary = call.summary as Record<string, unknown>;
      const feedback = byCall.get(call.id as string) ?? [];
      summary.weave = { ...(summary.weave as object), feedback };
      // A feedback payload may hold exact numbers (feedbackByCall parses it keeping them).
      if (feedback.length > 0) markHoldsExactNumbers(call);
    }
  }
  return calls;
}

/** include_usernames: `wb_username`, the name of the user each call's `wb_user_id` names (null for none). */
async function addUsernames(deps: TracingDeps, calls: Record<string, unknown>[]): Promise<void> {
  const ids = [...new Set(calls.map((call) => call.wb_user_id).filter((id): id is string => typeof id === 'string'))];
  const names = await usernamesByIds(deps.db, ids);
  for (const call of calls) call.wb_username = typeof call.wb_user_id === 'string' ? (names.get(call.wb_user_id) ?? null) : null;
}

/**
 * The calls of a query in batches of their JSON texts (callText), read as the consumer asks for them (see
 * readInBatches): `/calls/stream_query` sends them as JSON Lines, `/calls/query` gathers them. The first
 * batch holds FIRST_BATCH_ROWS calls; each later one as many as would have made BATCH_TARGET_CHARS characters of the
 * batch before (at least 1, at most STREAM_BATCH_SIZE), so that a batch of large calls stays a few
 * megabytes rather than hundreds.
 */
export async function* callTexts(deps: TracingDeps, projectId: string, body: Omit<CallsQueryBody, 'project_id'>): AsyncGenerator<string[]> {
  const { args, ended } = startOfPage(deps, listArgs(projectId, body));
  let size = FIRST_BATCH_ROWS;
  const batches = readInBatches(deps, {
    query: repo.callsListQuery(args), // compiles (and validates) the query before anything is read
    window: async (db, window) => (await repo.callsWindowQuery(args, window).execute(db)).rows,
    key: seeksAfter(args.sortBy) ? positionOf : undefined,
    limit: args.limit,
    offset: args.offset,
    size: () => size,
  });
  let count = 0;
  let last: repo.CallRow | undefined;
  for await (const { rows, db } of batches) {
    streamBatchChannel.publish({ rows: rows.length });
    if (rows.length === 0) continue;
    count += rows.length;
    last = rows[rows.length - 1];
    const texts = (await finish({ db, kind: deps.kind }, projectId, rows, args, body)).map(callText);
    let bytes = 0;
    for (const text of texts) bytes += text.length;
    size = Math.min(STREAM_BATCH_SIZE, Math.max(1, Math.floor((rows.length * BATCH_TARGET_CHARS) / Math.max(bytes, 1))));
    yield texts;
  }
  if (last !== undefined) ended(count, last);
}

/** A call's JSON text as answers carry it: exact numbers written as their literals. */
function callText(call: Record<string, unknown>): string {
  const text = JSON.stringify(call);
  return holdsExactNumbers(call) ? unmarkNumbers(text) : text;
}

/** A stored row as the clients' CallSchema, with the derived `summary.weave` (reference §3.6). */
export function toCallSchema(stored: repo.CallRow, selection: repo.CallSelection): Record<string, unknown> {
  const row = stored.exact_numbers ? withExactPayloads(stored) : stored;
  const has = (column: string) => column in row;
  const displayName = has('display_name') && row.display_name !== '' ? (row.display_name as string | null) : null;
  const opName = row.op_name as string;
  const call: Record<string, unknown> = {
    id: row.id,
    project_id: row.project_id,
    op_name: opName,
    display_name: displayName,
    trace_id: row.trace_id,
    parent_id: row.parent_id ?? null,
    thread_id: row.thread_id ?? null,
    turn_id: row.turn_id ?? null,
    started_at: row.started_at,
    attributes: (row.attributes as object | null) ?? {},
    inputs: (row.inputs as object | null) ?? {},
    ended_at: row.ended_at ?? null,
    exception: row.exception ?? null,
    output: row.output ?? null,
    summary: null,
    wb_user_id: row.wb_user_id ?? null,
    wb_run_id: row.wb_run_id ?? null,
    wb_run_step: row.wb_run_step ?? null,
    wb_run_step_end: row.wb_run_step_end ?? null,
    deleted_at: row.deleted_at ?? null,
  };
  if (row.otel_dump) call.attributes = { ...(call.attributes as object), otel_span: row.otel_dump };
  if (!selection.columns || selection.columns.has('summary')) {
    const stored = (row.summary as Record<string, unknown> | null) ?? {};
    const weave: Record<string, unknown> = { status: status(row), trace_name: displayName ?? traceName(opName) };
    if (row.ended_at != null && row.latency_ms != null) weave.latency_ms = Number(row.latency_ms);
    call.summary = { ...stored, weave: { ...(isJsonObject(stored.weave) ? stored.weave : {}), ...weave } };
  }
  if (selection.storageSize) call.storage_size_bytes = row.storage_size_bytes == null ? null : Number(row.storage_size_bytes);
  if (selection.totalStorageSize) call.total_storage_size_bytes = row.total_storage_size_bytes == null ? null : Number(row.total_storage_size_bytes);
  if (stored.exact_numbers) markHoldsExactNumbers(call);
  return call;
}

/** A row whose payloads came as JSON text (repositories/calls.ts CallRow), parsed keeping its exact numbers. */
function withExactPayloads(stored: repo.CallRow): repo.CallRow {
  const row = { ...stored };
  for (const column of repo.PAYLOAD_COLUMNS) {
    const text = row[`${column}_text`];
    if (typeof text === 'string') row[column] = parsePayloadText(text, true);
  }
  return row;
}


function status(row: repo.CallRow): string {
  if (row.exception != null) return 'error';
  const counts = isJsonObject(row.summary) ? row.summary.status_counts : undefined;
  if (isJsonObject(counts) && (numberOf(counts.error) ?? 0) > 0) return 'descendant_error';
  if (row.ended_at == null) return 'running';
  return 'success';
}

/** `weave:///e/p/op/<name>:<digest>` names its op; anything else is the op name itself. */
function traceName(opName: string): string {
  return /^weave:\/\/\/[^/]+\/[^/]+\/op\/([^/:]+):/.exec(opName)?.[1] ?? opName;
}

/**
 * expand_columns: a ref at one of the dotted paths is replaced by the referenced value, with the ref
 * kept under `_ref`; shorter paths first, so longer ones walk through expanded values (reference §3.7).
 */
async function expandCallColumns(db: Executor, projectId: string, calls: Record<string, unknown>[], paths: readonly string[]): Promise<void> {
  const ordered = paths.map(splitFieldPath).sort((a, b) => a.length - b.length);
  for (const segments of ordered) {
    const sites: { parent: Record<string, unknown> | unknown[]; key: string | number; ref: string }[] = [];
    for (const call of calls) {
      let parent: unknown = call;
      for (let i = 0; i < segments.length - 1 && parent !== undefined; i++) parent = child(parent, segments[i]);
      const last = segments[segments.length - 1];
      const value = child(parent, last);
      if (isWeaveRef(value) && parent !== null && typeof parent === 'object') {
        sites.push({ parent: parent as Record<string, unknown>, key: Array.isArray(parent) ? Number(last) : last, ref: value });
      }
    }
    if (sites.length === 0) continue;
    const values = await expandRefs(db, projectId, sites.map((s) => s.ref));
    for (const site of sites) {
      const value = values.get(site.ref);
      if (value === undefined) continue;
      const expanded = isJsonObject(value) ? { ...value, _ref: site.ref } : value;
      (site.parent as Record<string | number, unknown>)[site.key] = expanded;
    }
  }
}

function child(value: unknown, segment: string): unknown {
  if (Array.isArray(value)) return /^\d+$/.test(segment) ? value[Number(segment)] : undefined;
  if (isJsonObject(value)) return Object.hasOwn(value, segment) ? value[segment] : undefined;
  return undefined;
}
