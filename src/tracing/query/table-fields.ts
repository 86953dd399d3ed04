import { sql, type RawBuilder } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { InvalidFieldError, splitFieldPath, type FieldResolver } from './expr.js';
import type { Operand, Query, SortBy } from './schema.js';
import { sortExprs, type SqlType } from './values.js';

/**
 * Fields of the smaller tracing tables (feedback, prices) for the `$expr` compiler, sorting and
 * projection: typed columns plus dotted paths into one JSON column (reference §3.8, "the same language
 * with the table's own columns").
 */
export interface TableFields {
  table: string;
  columns: Record<string, SqlType>;
  /** The JSONB column whose sub-paths may be named (`payload.note`), if any. */
  json?: string;
}

const MAX_SEGMENTS = 32;

export function tableFieldResolver(fields: TableFields): FieldResolver {
  const col = (name: string) => sql.ref(`${fields.table}.${name}`);
  return (path) => {
    // Own keys only: `constructor`, `toString` or `__proto__` are unknown fields (403), not prototype members.
    if (Object.hasOwn(fields.columns, path)) return { kind: 'typed', type: fields.columns[path], sql: col(path) };
    const [column, ...segments] = splitFieldPath(path);
    if (column !== fields.json) throw new InvalidFieldError(path, `not a field of ${fields.table.replace(/^trace_/, '')}`);
    if (segments.length > MAX_SEGMENTS) throw new InvalidFieldError(path, 'path too deep');
    for (const segment of segments) {
      if (segment.length === 0 || segment.length > 256 || /[\u0000-\u001f\u007f]/.test(segment)) throw new InvalidFieldError(path, 'bad path segment');
    }
    const json = segments.length === 0 ? col(column) : sql`jsonb_extract_path(${col(column)}, ${sql.join(segments.map((s) => sql`${s}::text`))})`;
    return { kind: 'json', sql: json };
  };
}

/** ORDER BY for a table: typed columns as they are, JSON paths by number then text; missing values last. */
export function tableOrderBy(resolve: FieldResolver, sortBy: readonly SortBy[], tieBreak: RawBuilder<unknown>): RawBuilder<unknown> {
  const keys = sortBy.flatMap(({ field, direction }) => {
    if (direction !== 'asc' && direction !== 'desc') {
      throw new InvalidRequestError(`Invalid sort direction ${JSON.stringify(direction)}: expected asc or desc`, { code: 'invalid_sort' });
    }
    const dir = sql.raw(direction);
    const value = resolve(field);
    return sortExprs(value).map((expr) => sql`${expr} ${dir} nulls last`);
  });
  keys.push(tieBreak);
  return sql.join(keys);
}

/**
 * The ids a purge query names. Purges may only name rows by id (reference §2.7, §2.8):
 * `$eq [$getField id, $literal "<id>"]`, an `$or` of those, or `$in [$getField id, [$literal ...]]`.
 */
export function purgeIds(query: Query, what: 'feedback' | 'cost'): string[] {
  const refused = () => new InvalidRequestError(`Can only purge by specifying one or more ${what} ids`, { code: 'invalid_purge' });
  const isId = (operand: Operand) => '$getField' in operand && operand.$getField === 'id';
  const literal = (operand: Operand): string => {
    if ('$literal' in operand && typeof operand.$literal === 'string') return operand.$literal;
    throw refused();
  };
  const eq = (operand: Operand): string => {
    if (!('$eq' in operand)) throw refused();
    const [left, right] = operand.$eq;
    if (isId(left)) return literal(right);
    if (isId(right)) return literal(left);
    throw refused();
  };
  const expr = query.$expr;
  if ('$eq' in expr) return [eq(expr)];
  if ('$or' in expr && expr.$or.length > 0) return expr.$or.map(eq);
  if ('$in' in expr && isId(expr.$in[0])) return expr.$in[1].map(literal);
  throw refused();
}
