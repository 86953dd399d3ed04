import { sql, type RawBuilder } from 'kysely';
import { InvalidFieldError, splitFieldPath, type FieldResolver } from './expr.js';
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

export interface CallFieldOptions {
  /**
   * The request's expand_columns: a field below one of them (`inputs.model.max_tokens` under
   * `inputs.model`) reads the referenced object's value, as the answer shows it expanded.
   */
  expandColumns?: readonly string[] | null;
}

/**
 * Resolves fields of the calls table for the `$expr` compiler and for sorting, for one request (its
 * expand_columns decide which paths read through refs).
 */
export function callFieldResolver(options: CallFieldOptions = {}): FieldResolver {
  const expand = [...new Set(options.expandColumns ?? [])].map(splitFieldPath).sort((a, b) => a.length - b.length);
  return (path) => {
    if (path === 'display_name') return { kind: 'typed', type: 'text', sql: displayName };
    // Own keys only: a field named `constructor` or `__proto__` is no column (it is an unknown field, 403).
    if (Object.hasOwn(COLUMNS, path)) return { kind: 'typed', type: COLUMNS[path], sql: col(path) };
    if (Object.hasOwn(DERIVED, path)) return { kind: 'typed', ...DERIVED[path] };
    if (path.startsWith('feedback.')) return feedbackField(path);

    const [column, ...segments] = splitFieldPath(path);
    if (!JSON_COLUMNS.has(column)) throw new InvalidFieldError(path, 'not a column of calls');
    if (column === 'summary' && segments[0] === 'weave') {
      throw new InvalidFieldError(path, 'summary.weave has only status, latency_ms and trace_name');
    }
    checkSegments(path, segments);
    // Walk the path, reading through the ref at each expanded column that is a proper prefix of it.
    let json: RawBuilder<unknown> = col(column);
    let at = 0;
    for (const prefix of expand) {
      if (prefix.length - 1 >= segments.length || prefix[0] !== column) continue;
      const inner = prefix.slice(1);
      if (!inner.every((segment, i) => segments[i] === segment) || inner.length < at) continue;
      json = referencedValue(jsonPath(json, segments.slice(at, inner.length)));
      at = inner.length;
    }
    return { kind: 'json', sql: jsonPath(json, segments.slice(at)) };
  };
}

function checkSegments(path: string, segments: readonly string[]): void {
  if (segments.length > MAX_SEGMENTS) throw new InvalidFieldError(path, 'path too deep');
  for (const segment of segments) {
    // Segments are bound as parameters, so this guards sanity, not SQL: no empty or control characters.
    if (segment.length === 0 || segment.length > MAX_SEGMENT_LENGTH || /[\u0000-\u001f\u007f]/.test(segment)) {
      throw new InvalidFieldError(path, 'bad path segment');
    }
  }
}

function jsonPath(json: RawBuilder<unknown>, segments: readonly string[]): RawBuilder<unknown> {
  return segments.length === 0 ? json : sql`jsonb_extract_path(${json}, ${sql.join(segments.map((s) => sql`${s}::text`))})`;
}

/** An object or op ref of the call's own project, exact digest, no extra path: project, kind, name, digest. */
const REF_PATTERN = '^weave:///([^/]+/[^/]+)/(object|op)/([^/:]+):([^/:]+)$';

/**
 * The value of the object version a JSON ref string names (SQL null when it is no such ref, names
 * another project, or the version is missing or deleted: expand_columns leaves those unexpanded too).
 */
function referencedValue(ref: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(select o.val from trace_objects o, regexp_match(${ref} #>> '{}', ${REF_PATTERN}) as m(part)
    where o.project_id = ${col('project_id')} and m.part[1] = ${col('project_id')} and o.kind = m.part[2]
      and o.object_id = m.part[3] and o.digest = m.part[4] and o.deleted_at is null)`;
}

/**
 * `feedback.[<feedback_type>].payload.<path>`, `.runnable_ref` or `.trigger_ref` (weave's feedback
 * fields): read from the call's feedback of that type, the newest when there are several (weave takes
 * any one); `[*]` takes the newest feedback of any type that has the path.
 */
function feedbackField(path: string): FieldValue {
  const match = /^feedback\.\[(.+)\]\.(.+)$/.exec(path);
  if (!match) throw new InvalidFieldError(path, 'expected feedback.[<feedback_type>].payload.<path>, .runnable_ref or .trigger_ref');
  const [, type, rest] = match;
  const [head, ...segments] = splitFieldPath(rest);
  const ofCall = sql`fb.project_id = ${col('project_id')} and fb.weave_ref = 'weave:///' || ${col('project_id')} || '/call/' || ${col('id')}`;
  const ofType = type === '*' ? sql`` : sql`and fb.feedback_type = ${type}`;
  const newest = sql`order by fb.created_at desc, fb.id desc limit 1`;
  if ((head === 'runnable_ref' || head === 'trigger_ref') && segments.length === 0) {
    const column = sql.ref(`fb.${head}`);
    const present = type === '*' ? sql`and ${column} is not null` : sql``;
    return { kind: 'typed', type: 'text', sql: sql`(select ${column} from trace_feedback fb where ${ofCall} ${ofType} ${present} ${newest})` };
  }
  if (head !== 'payload') throw new InvalidFieldError(path, 'a feedback field is payload.<path>, runnable_ref or trigger_ref');
  checkSegments(path, segments);
  const value = jsonPath(sql.ref('fb.payload'), segments);
  const present = type === '*' && segments.length > 0 ? sql`and ${value} is not null` : sql``;
  return { kind: 'json', sql: sql`(select ${value} from trace_feedback fb where ${ofCall} ${ofType} ${present} ${newest})` };
}
