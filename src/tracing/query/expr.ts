import { sql, type RawBuilder, type SqlBool } from 'kysely';
import { ForbiddenError, InvalidRequestError } from '../../errors.js';
import type { ConvertTarget, Operand, Operation } from './schema.js';
import { byteOrder, exists, isNull, literalType, toType, type FieldValue, type SqlType, type Value } from './values.js';

/**
 * Compiles a `$expr` to a SQL boolean. Fields are resolved by the table's resolver (calls, and later
 * feedback and costs, which share the language), so this file knows no column names.
 */

/** Resolves a `$getField` path of one table; throws InvalidFieldError for anything it does not know. */
export type FieldResolver = (path: string) => FieldValue;

/** weave answers a query on a non-existent or forbidden field with 403. */
export class InvalidFieldError extends ForbiddenError {
  constructor(field: string, why: string) {
    super(`Invalid field ${JSON.stringify(field)}: ${why}`, { code: 'invalid_field' });
  }
}

/**
 * The segments of a dotted field path, as weave splits them: a dot after a backslash is part of the key
 * (`summary.usage.gpt-4\\.1.requests` reads the key `gpt-4.1`), so keys holding dots can be named.
 */
export function splitFieldPath(path: string): string[] {
  return path.split(/(?<!\\)\./).map((segment) => segment.replaceAll('\\.', '.'));
}

const COMPARISONS = { $eq: '=', $gt: '>', $gte: '>=', $lt: '<', $lte: '<=' } as const;
type ComparisonKey = keyof typeof COMPARISONS;

const CONVERT_TYPES: Record<Exclude<ConvertTarget, 'exists'>, SqlType> = {
  double: 'numeric',
  int: 'numeric',
  string: 'text',
  bool: 'bool',
};

/** An ASCII character that is not a letter or digit: what separates tokens for $containsToken. */
const SEPARATOR = '[\\x01-\\x2f\\x3a-\\x40\\x5b-\\x60\\x7b-\\x7f]';
const TOKEN_SEPARATORS = `${SEPARATOR}+`;
const BEFORE_TOKEN = `(^|${SEPARATOR})`;
const AFTER_TOKEN = `(${SEPARATOR}|$)`;
/**
 * The longest token $containsToken looks for with a regular expression; a longer one is compared with the
 * text's tokens instead. PostgreSQL compiles a long pattern slowly (10,000 characters: 2 s on PGlite) and
 * refuses a longer one as too complex.
 */
const TOKEN_PATTERN_CHARS = 256;

const invalid = (message: string) => new InvalidRequestError(message, { code: 'invalid_query' });

export function compileExpr(expr: Operation, resolve: FieldResolver): RawBuilder<SqlBool> {
  return toType(compileOperand(expr, resolve), 'bool') as RawBuilder<SqlBool>;
}

function compileOperand(operand: Operand, resolve: FieldResolver): Value {
  if ('$literal' in operand) return { kind: 'literal', value: operand.$literal };
  if ('$getField' in operand) return resolve(operand.$getField);
  if ('$convert' in operand) return convert(compileOperand(operand.$convert.input, resolve), operand.$convert.to);
  return { kind: 'typed', type: 'bool', sql: compileOperation(operand, resolve) };
}

function compileOperation(op: Operation, resolve: FieldResolver): RawBuilder<unknown> {
  const asBool = (operand: Operand) => toType(compileOperand(operand, resolve), 'bool');
  if ('$and' in op || '$or' in op) {
    const [list, joiner] = '$and' in op ? [op.$and, ' and '] : [op.$or, ' or '];
    if (list.length === 0) throw invalid(`${'$and' in op ? '$and' : '$or'} needs at least one operand`);
    return sql`(${sql.join(list.map(asBool), sql.raw(joiner))})`;
  }
  // SQL's three-valued NOT, as weave's stores answer (docs/tracing.md): a comparison with a NULL column
  // is unknown and so is its negation, which does not match. Missing JSON paths read as '' and do.
  if ('$not' in op) return sql`(not ${asBool(op.$not[0])})`;
  if ('$in' in op) {
    const [left, right] = op.$in;
    return membership(compileOperand(left, resolve), right.map((item) => compileOperand(item, resolve)));
  }
  if ('$contains' in op) {
    const { input, substr, case_insensitive: caseInsensitive } = op.$contains;
    const haystack = toType(compileOperand(input, resolve), 'text');
    const needle = toType(compileOperand(substr, resolve), 'text');
    // strpos rather than LIKE: the needle is data, and LIKE would read its % and _ as wildcards.
    return caseInsensitive ? sql`(strpos(lower(${haystack}), lower(${needle})) > 0)` : sql`(strpos(${haystack}, ${needle}) > 0)`;
  }
  if ('$containsToken' in op) {
    const { input, substr, case_insensitive: caseInsensitive } = op.$containsToken;
    const fold = (text: RawBuilder<unknown>) => (caseInsensitive ? sql`lower(${text})` : text);
    return containsToken(fold(toType(compileOperand(input, resolve), 'text')), fold(toType(compileOperand(substr, resolve), 'text')));
  }
  const key = Object.keys(op)[0] as ComparisonKey;
  const [left, right] = (op as Record<ComparisonKey, [Operand, Operand]>)[key];
  return compare(key, compileOperand(left, resolve), compileOperand(right, resolve));
}

/**
 * Whether `needle` is one of the tokens of `haystack`: the text split on runs of ASCII characters that are
 * not letters or digits (ClickHouse's hasToken; other characters belong to tokens); an empty needle never
 * matches. That is `needle = any(regexp_split_to_array(haystack, TOKEN_SEPARATORS))`, which builds an array
 * of every token of every row; a needle without separators is a token exactly where it stands between
 * separators or the ends of the text, which one regular-expression scan finds, stopping at the first
 * (2 to 5 times faster on PGlite). Such a needle holds only letters, digits and non-ASCII characters, none
 * of them special in a pattern. A needle with a separator is no token: false (null with a null haystack, as
 * the array's comparison answers). Null in, null out, as before.
 */
function containsToken(haystack: RawBuilder<unknown>, needle: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(case when ${needle} = '' then false
    when ${needle} ~ ${SEPARATOR} then (case when ${haystack} is null then null::boolean else false end)
    when length(${needle}) <= ${sql.lit(TOKEN_PATTERN_CHARS)} then ${haystack} ~ (${BEFORE_TOKEN} || ${needle} || ${AFTER_TOKEN})
    else ${needle} = any(regexp_split_to_array(${haystack}, ${TOKEN_SEPARATORS})) end)`;
}

function compare(key: ComparisonKey, left: Value, right: Value): RawBuilder<unknown> {
  const nullSide = [left, right].find((v) => v.kind === 'literal' && v.value === null);
  if (nullSide) {
    if (key !== '$eq') throw invalid(`${key} cannot compare with null; use $eq`);
    return isNull(nullSide === left ? right : left);
  }
  const type = comparisonType(left, right);
  // Strings order by bytes, whatever the database's collation (equality does not depend on it).
  const lhs = type === 'text' && key !== '$eq' ? byteOrder(toType(left, type)) : toType(left, type);
  return sql`(${lhs} ${sql.raw(COMPARISONS[key])} ${toType(right, type)})`;
}

function membership(left: Value, items: Value[]): RawBuilder<unknown> {
  const present = items.filter((item) => !(item.kind === 'literal' && item.value === null));
  const tests: RawBuilder<unknown>[] = [];
  if (present.length > 0) {
    const type = present.map((item) => comparisonType(left, item)).reduce(widen);
    tests.push(sql`${toType(left, type)} in (${sql.join(present.map((item) => toType(item, type)))})`);
  }
  if (present.length < items.length) tests.push(isNull(left));
  return tests.length === 0 ? sql`false` : sql`(${sql.join(tests, sql` or `)})`;
}

/**
 * The type both sides are compared as. A typed side decides; a JSON path takes the literal's type (the
 * newer servers' inferred cast); two fields of different types meet as text.
 */
function comparisonType(left: Value, right: Value): SqlType {
  if (left.kind === 'typed' && right.kind === 'typed') return left.type === right.type ? left.type : 'text';
  if (left.kind === 'typed') return left.type;
  if (right.kind === 'typed') return right.type;
  const literal = left.kind === 'literal' ? left : right.kind === 'literal' ? right : undefined;
  return literal ? (literalType(literal.value) ?? 'text') : 'text';
}

/** Mixed types in one `$in` list meet as numbers when they are numbers and bools, else as text. */
function widen(a: SqlType, b: SqlType): SqlType {
  if (a === b) return a;
  const numeric: SqlType[] = ['numeric', 'bool'];
  return numeric.includes(a) && numeric.includes(b) ? 'numeric' : 'text';
}

function convert(value: Value, to: ConvertTarget): Value {
  if (to === 'exists') return { kind: 'typed', type: 'bool', sql: exists(value) };
  const type = CONVERT_TYPES[to];
  const literal = value.kind === 'literal' ? literalType(value.value) : null;
  // A literal converts from its own type (`"3.5"` to double), not by being bound as the target.
  const source: Value = literal ? { kind: 'typed', type: literal, sql: toType(value, literal) } : value;
  const converted = toType(source, type);
  return { kind: 'typed', type, sql: to === 'int' ? sql`trunc(${converted})` : converted };
}
