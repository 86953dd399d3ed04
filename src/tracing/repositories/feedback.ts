import { sql, type RawBuilder } from 'kysely';
import { chunksForParameters } from '../../db/limits.js';
import { ConflictError } from '../../errors.js';
import { compileExpr } from '../query/expr.js';
import type { Query, SortBy } from '../query/schema.js';
import { tableFieldResolver, tableOrderBy, type TableFields } from '../query/table-fields.js';
import { isoText, isPgError, toInt, type Executor } from './common.js';

/** trace_feedback: one row per feedback, payload normalised by the service (reference §2.7). */

export const FEEDBACK_FIELDS: TableFields = {
  table: 'trace_feedback',
  columns: {
    id: 'text',
    project_id: 'text',
    weave_ref: 'text',
    wb_user_id: 'text',
    creator: 'text',
    created_at: 'timestamptz',
    feedback_type: 'text',
    annotation_ref: 'text',
    runnable_ref: 'text',
    call_ref: 'text',
    trigger_ref: 'text',
    queue_id: 'text',
  },
  json: 'payload',
};
export const FEEDBACK_COLUMNS = [...Object.keys(FEEDBACK_FIELDS.columns), 'payload'];
const resolve = tableFieldResolver(FEEDBACK_FIELDS);

export interface FeedbackWrite {
  projectId: string;
  id: string;
  weaveRef: string;
  wbUserId: string;
  creator: string | null;
  feedbackType: string;
  /** JSON text. */
  payload: string;
  /** Whether the payload holds numbers a double would change (the row's exact_numbers). */
  exactNumbers: boolean;
  annotationRef: string | null;
  runnableRef: string | null;
  callRef: string | null;
  triggerRef: string | null;
  queueId: string | null;
}

/** Inserts rows and returns their created_at as ISO text, in order; a taken id is a 409. */
export async function insertFeedback(db: Executor, rows: readonly FeedbackWrite[]): Promise<string[]> {
  if (rows.length === 0) return [];
  try {
    const inserted: { id: string; created_at: string }[] = [];
    for (const chunk of chunksForParameters(rows, FEEDBACK_COLUMNS.length + 1)) {
      inserted.push(
        ...(await db
          .insertInto('trace_feedback')
          .values(
            chunk.map((r) => ({
              project_id: r.projectId,
              id: r.id,
              weave_ref: r.weaveRef,
              wb_user_id: r.wbUserId,
              creator: r.creator,
              feedback_type: r.feedbackType,
              payload: sql`${r.payload}::jsonb`,
              annotation_ref: r.annotationRef,
              runnable_ref: r.runnableRef,
              call_ref: r.callRef,
              trigger_ref: r.triggerRef,
              queue_id: r.queueId,
              exact_numbers: r.exactNumbers,
            })) as never,
          )
          .returning([sql<string>`${isoText(sql.ref('created_at'))}`.as('created_at'), 'id'])
          .execute()),
      );
    }
    const byId = new Map(inserted.map((row) => [row.id, row.created_at]));
    return rows.map((r) => byId.get(r.id)!);
  } catch (error) {
    if (isPgError(error, '23505')) {
      const detail = /\(project_id, id\)=\([^,]*, (.*)\)/.exec((error as { detail?: string }).detail ?? '')?.[1];
      throw new ConflictError(`Feedback ${detail ?? 'with this id'} already exists in this project; send another id or none.`, { code: 'feedback_exists' });
    }
    throw error;
  }
}

export async function deleteFeedback(db: Executor, args: { projectId: string; ids: readonly string[] }): Promise<number> {
  let deleted = 0;
  for (const ids of chunksForParameters(args.ids, 1)) {
    const result = await db.deleteFrom('trace_feedback').where('project_id', '=', args.projectId).where('id', 'in', ids).executeTakeFirst();
    deleted += toInt(result.numDeletedRows);
  }
  return deleted;
}

export interface FeedbackQueryArgs {
  projectId: string;
  /** Output key → SQL expression. */
  select: { key: string; sql: RawBuilder<unknown> }[];
  query?: Query | null;
  sortBy?: readonly SortBy[] | null;
  limit?: number | null;
  offset?: number | null;
}

function where(projectId: string, query: Query | null | undefined): RawBuilder<unknown> {
  const conditions = [sql`trace_feedback.project_id = ${projectId}`];
  if (query) conditions.push(compileExpr(query.$expr, resolve));
  return sql.join(conditions, sql` and `);
}

/** Whether a field of a feedback query is the payload or a path in it (JSON, the rest are text). */
export const isPayloadField = (column: string): boolean => column === 'payload' || column.startsWith('payload.');

/** The row's exact_numbers, selected beside payload fields: whether to parse them keeping exact numbers. */
export const EXACT_NUMBERS_SQL = sql.ref('trace_feedback.exact_numbers');

/**
 * A field of a feedback query as SQL: columns (timestamps as ISO text), and the payload and paths in
 * it as JSON text, which the service parses (keeping exact numbers when the row's exact_numbers says so).
 */
export function feedbackFieldSql(column: string): RawBuilder<unknown> {
  if (column === 'created_at') return isoText(sql.ref('trace_feedback.created_at'));
  const field = resolve(column).sql;
  return isPayloadField(column) ? sql`(${field})::text` : field;
}

export async function queryFeedback(db: Executor, args: FeedbackQueryArgs): Promise<Record<string, unknown>[]> {
  const order = tableOrderBy(resolve, args.sortBy?.length ? args.sortBy : [{ field: 'created_at', direction: 'asc' }], sql`trace_feedback.id asc`);
  const items = args.select.map((s, i) => sql`${s.sql} as ${sql.ref(`f${i}`)}`);
  const { rows } = await sql<Record<string, unknown>>`select ${sql.join(items)} from trace_feedback where ${where(args.projectId, args.query)}
    order by ${order} ${args.limit != null ? sql`limit ${args.limit}` : sql``} ${args.offset ? sql`offset ${args.offset}` : sql``}`.execute(db);
  return rows.map((row) => Object.fromEntries(args.select.map((s, i) => [s.key, row[`f${i}`] ?? null])));
}

export async function countFeedback(db: Executor, args: { projectId: string; query?: Query | null }): Promise<number> {
  const { rows } = await sql<{ n: unknown }>`select count(*) as n from trace_feedback where ${where(args.projectId, args.query)}`.execute(db);
  return toInt(rows[0]?.n);
}

/** Every feedback row on the given refs, oldest first (include_feedback on calls queries). */
export async function feedbackForRefs(db: Executor, args: { projectId: string; refs: readonly string[] }): Promise<Record<string, unknown>[]> {
  const items = FEEDBACK_COLUMNS.map((column) => sql`${feedbackFieldSql(column)} as ${sql.ref(column)}`);
  items.push(sql`${EXACT_NUMBERS_SQL} as exact_numbers`);
  const found: Record<string, unknown>[] = [];
  // Each ref falls in one chunk, so every ref's rows stay in order.
  for (const refs of chunksForParameters(args.refs, 1)) {
    const { rows } = await sql<Record<string, unknown>>`select ${sql.join(items)} from trace_feedback
      where trace_feedback.project_id = ${args.projectId} and trace_feedback.weave_ref in (${sql.join(refs)})
      order by trace_feedback.created_at asc, trace_feedback.id asc`.execute(db);
    found.push(...rows);
  }
  return found;
}
