import { sql, type RawBuilder } from 'kysely';
import { InvalidFieldError } from './expr.js';
import type { FieldValue, SqlType } from './values.js';

/**
 * The fields a calls query may name (reference §3.8): typed columns, dotted paths into the JSON columns,
 * and the derived `summary.weave.*` values. Anything else is an InvalidFieldError, 403 in weave.
 */

export const CALLS_TABLE = 'trace_calls';

const col = (name: string) => sql.ref(`${CALLS_TABLE}.${name}`);

const COLUMNS: Record<string, SqlType> = {
  id: 'text',
  project_id: 'text',
  op_name: 'text',
  display_name: 'text',
  trace_id: 'text',
  parent_id: 'text',
  thread_id: 'text',
  turn_id: 'text',
  started_at: 'timestamptz',
  ended_at: 'timestamptz',
  exception: 'text',
  wb_user_id: 'text',
  wb_run_id: 'text',
  wb_run_step: 'numeric',
  wb_run_step_end: 'numeric',
  deleted_at: 'timestamptz',
};

const JSON_COLUMNS = new Set(['inputs', 'output', 'attributes', 'summary']);

/** Clients store `''` to mean "no display name". */
const displayName = sql`nullif(${col('display_name')}, '')`;

/** The derived fields, computed as the read path computes them (reference §3.6). */
const DERIVED: Record<string, { type: SqlType; sql: RawBuilder<unknown> }> = {
  'summary.weave.status': {
    type: 'text',
    sql: sql`(case
      when ${col('exception')} is not null then 'error'
      when (case when jsonb_typeof(${col('summary')} #> '{status_counts,error}') = 'number'
        then (${col('summary')} #>> '{status_counts,error}')::numeric > 0 else false end) then 'descendant_error'
      when ${col('ended_at')} is null then 'running'
      else 'success' end)`,
  },
  'summary.weave.latency_ms': {
    type: 'numeric',
    sql: sql`floor(extract(epoch from (${col('ended_at')} - ${col('started_at')})) * 1000)`,
  },
  'summary.weave.trace_name': {
    type: 'text',
    // An op ref names its op as `weave:///<entity>/<project>/op/<name>:<digest>`.
    sql: sql`coalesce(${displayName}, substring(${col('op_name')} from '^weave:///[^/]+/[^/]+/op/([^/:]+):'), ${col('op_name')})`,
  },
};

const MAX_SEGMENTS = 32;
const MAX_SEGMENT_LENGTH = 256;

/** Resolves a field of the calls table for the `$expr` compiler and for sorting. */
export function resolveCallField(path: string): FieldValue {
  if (path === 'display_name') return { kind: 'typed', type: 'text', sql: displayName };
  // Own keys only: a field named `constructor` or `__proto__` is no column (it is an unknown field, 403).
  if (Object.hasOwn(COLUMNS, path)) return { kind: 'typed', type: COLUMNS[path], sql: col(path) };
  if (Object.hasOwn(DERIVED, path)) return { kind: 'typed', ...DERIVED[path] };

  const [column, ...segments] = path.split('.');
  if (!JSON_COLUMNS.has(column)) throw new InvalidFieldError(path, 'not a column of calls');
  if (column === 'summary' && segments[0] === 'weave') {
    throw new InvalidFieldError(path, 'summary.weave has only status, latency_ms and trace_name');
  }
  if (segments.length > MAX_SEGMENTS) throw new InvalidFieldError(path, 'path too deep');
  for (const segment of segments) {
    // Segments are bound as parameters, so this guards sanity, not SQL: no empty or control characters.
    if (segment.length === 0 || segment.length > MAX_SEGMENT_LENGTH || /[\u0000-\u001f\u007f]/.test(segment)) {
      throw new InvalidFieldError(path, 'bad path segment');
    }
  }
  const json = segments.length === 0 ? col(column) : sql`jsonb_extract_path(${col(column)}, ${sql.join(segments.map((s) => sql`${s}::text`))})`;
  return { kind: 'json', sql: json };
}
