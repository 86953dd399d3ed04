import { DummyDriver, Kysely, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { ForbiddenError, InvalidRequestError } from '../../src/errors.js';
import { InvalidFieldError } from '../../src/tracing/query/expr.js';
import { callsOrderBy, callsWhere } from '../../src/tracing/query/calls.js';
import { parseQuery, type CallsFilter, type SortBy } from '../../src/tracing/query/schema.js';
import type { TracingTables } from '../../src/tracing/tables.js';

const db = new Kysely<TracingTables>({
  dialect: {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (k) => new PostgresIntrospector(k),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  },
});

const BASE = '"trace_calls"."project_id" = $1 and "trace_calls"."started_at" is not null and "trace_calls"."deleted_at" is null';

function where(options: { filter?: CallsFilter; expr?: unknown }) {
  const query = options.expr === undefined ? null : parseQuery({ $expr: options.expr });
  const compiled = sql`${callsWhere({ projectId: 'e/p', filter: options.filter, query })}`.compile(db);
  expect(compiled.sql.startsWith(BASE)).toBe(true);
  return { sql: compiled.sql.slice(BASE.length).replace(/\s+/g, ' '), params: compiled.parameters.slice(1) };
}

function orderBy(sortBy?: SortBy[]) {
  const compiled = db.selectFrom('trace_calls').select('id').orderBy(callsOrderBy(sortBy)).compile();
  return { sql: compiled.sql.replace(/^.* order by /s, '').replace(/\s+/g, ' '), params: compiled.parameters };
}

const field = (path: string) => ({ $getField: path });
const lit = (value: unknown) => ({ $literal: value });

describe('calls scope', () => {
  it('binds the project and hides unstarted and deleted calls', () => {
    const compiled = sql`${callsWhere({ projectId: 'e/p' })}`.compile(db);
    expect(compiled.sql).toBe(BASE);
    expect(compiled.parameters).toEqual(['e/p']);
  });
});

describe('calls filter', () => {
  it('matches exact op names and `:*` wildcards as escaped prefixes', () => {
    const { sql: text, params } = where({ filter: { op_names: ['weave:///e/p/op/a:d1', 'weave:///e/p/op/my_op%:*'] } });
    expect(text).toBe(' and ("trace_calls"."op_name" in ($2) or "trace_calls"."op_name" like $3)');
    expect(params).toEqual(['weave:///e/p/op/a:d1', 'weave:///e/p/op/my\\_op\\%:%']);
  });

  it('matches input refs by array overlap and wildcards through unnest', () => {
    const { sql: text, params } = where({ filter: { input_refs: ['weave:///e/p/object/x:1', 'weave:///e/p/object/y:*'] } });
    expect(text).toBe(
      ' and ("trace_calls"."input_refs" && array[$2]::text[] or exists (select 1 from unnest("trace_calls"."input_refs") as r(ref) where r.ref like $3))',
    );
    expect(params).toEqual(['weave:///e/p/object/x:1', 'weave:///e/p/object/y:%']);
  });

  it('turns id lists into IN lists on their columns', () => {
    const { sql: text, params } = where({ filter: { trace_ids: ['t1', 't2'], call_ids: ['c'], wb_run_ids: ['e/p/r'] } });
    expect(text).toBe(' and "trace_calls"."trace_id" in ($2, $3) and "trace_calls"."id" in ($4) and "trace_calls"."wb_run_id" in ($5)');
    expect(params).toEqual(['t1', 't2', 'c', 'e/p/r']);
  });

  it('keeps only root calls when asked', () => {
    expect(where({ filter: { trace_roots_only: true } }).sql).toBe(' and "trace_calls"."parent_id" is null');
  });

  it('ignores empty lists, as the Python servers do', () => {
    expect(where({ filter: { parent_ids: [], op_names: [], trace_roots_only: false } }).sql).toBe('');
  });
});

describe('$expr', () => {
  it('compares a column with a bound string', () => {
    const { sql: text, params } = where({ expr: { $eq: [field('op_name'), lit('x')] } });
    expect(text).toBe(' and ("trace_calls"."op_name" = $2::text)');
    expect(params).toEqual(['x']);
  });

  it('reads a JSON path as text, missing as the empty string', () => {
    const { sql: text, params } = where({ expr: { $eq: [field('inputs.model.name'), lit('gpt')] } });
    expect(text).toBe(` and (coalesce(jsonb_extract_path("trace_calls"."inputs", $2::text, $3::text) #>> '{}', '') = $4::text)`);
    expect(params).toEqual(['model', 'name', 'gpt']);
  });

  it('casts a JSON path to a number when compared with a number literal', () => {
    const { sql: text, params } = where({ expr: { $gt: [field('output.score'), lit(0.5)] } });
    const path = (n: number) => `jsonb_extract_path("trace_calls"."output", $${n}::text)`;
    expect(text.startsWith(` and ((case jsonb_typeof(${path(2)}) when 'number' then`)).toBe(true);
    // A JSON number casts straight from JSONB; a string only when it reads as a number.
    expect(text).toContain(`then (${path(5)})::numeric end) when 'string' then`);
    expect(text).toContain(`then ((${path(9)} #>> '{}'))::numeric end) end) > $10::numeric)`);
    expect(params).toEqual([...Array(8).fill('score'), 0.5]);
  });

  it('casts a JSON path to bool when compared with a bool literal', () => {
    const { sql: text } = where({ expr: { $eq: [field('attributes.flag'), lit(true)] } });
    expect(text).toContain(`case lower(coalesce(jsonb_extract_path("trace_calls"."attributes", $2::text) #>> '{}', '')) when 'true' then true`);
  });

  it('reads a number compared with a datetime column as unix seconds', () => {
    const { sql: text, params } = where({ expr: { $gte: [field('started_at'), lit(1700000000)] } });
    expect(text).toBe(' and ("trace_calls"."started_at" >= to_timestamp($2::double precision))');
    expect(params).toEqual([1700000000]);
  });

  it('reads an ISO string compared with a datetime column as a timestamp', () => {
    const { sql: text } = where({ expr: { $lt: [field('ended_at'), lit('2025-01-02T03:04:05.123456Z')] } });
    expect(text).toBe(' and ("trace_calls"."ended_at" < $2::timestamptz)');
  });

  it('rejects a non-timestamp string compared with a datetime column', () => {
    expect(() => where({ expr: { $lt: [field('ended_at'), lit('yesterday')] } })).toThrow(InvalidRequestError);
  });

  it('compares with null as IS NULL on columns and as null-or-missing on JSON', () => {
    expect(where({ expr: { $eq: [field('parent_id'), lit(null)] } }).sql).toBe(' and ("trace_calls"."parent_id" is null)');
    expect(where({ expr: { $eq: [field('output'), lit(null)] } }).sql).toBe(
      ` and (coalesce("trace_calls"."output", 'null'::jsonb) = 'null'::jsonb)`,
    );
  });

  it('treats an empty display name as null', () => {
    expect(where({ expr: { $eq: [field('display_name'), lit(null)] } }).sql).toBe(` and (nullif("trace_calls"."display_name", '') is null)`);
  });

  it('combines $and, $or and $not', () => {
    const { sql: text } = where({
      expr: { $and: [{ $not: [{ $eq: [field('id'), lit('a')] }] }, { $or: [{ $eq: [field('id'), lit('b')] }, { $eq: [field('id'), lit('c')] }] }] },
    });
    expect(text).toBe(' and ((not ("trace_calls"."id" = $2::text)) and (("trace_calls"."id" = $3::text) or ("trace_calls"."id" = $4::text)))');
  });

  it('compiles $in with bound items and an empty $in as false', () => {
    const { sql: text, params } = where({ expr: { $in: [field('trace_id'), [lit('a'), lit('b'), lit(null)]] } });
    expect(text).toBe(' and ("trace_calls"."trace_id" in ($2::text, $3::text) or ("trace_calls"."trace_id" is null))');
    expect(params).toEqual(['a', 'b']);
    expect(where({ expr: { $in: [field('trace_id'), []] } }).sql).toBe(' and false');
  });

  it('compiles $contains with strpos, lowering both sides when case-insensitive', () => {
    const { sql: text, params } = where({ expr: { $contains: { input: field('op_name'), substr: lit('%_'), case_insensitive: true } } });
    expect(text).toBe(' and (strpos(lower("trace_calls"."op_name"), lower($2::text)) > 0)');
    expect(params).toEqual(['%_']);
  });

  it('compiles $convert to double, int, string, bool and exists', () => {
    expect(where({ expr: { $gt: [{ $convert: { input: field('inputs.n'), to: 'int' } }, lit(2)] } }).sql).toMatch(/^ and \(trunc\(\(case .* end\)\) > \$\d+::numeric\)$/);
    expect(where({ expr: { $eq: [{ $convert: { input: field('wb_run_step'), to: 'string' } }, lit('3')] } }).sql).toBe(
      ' and (("trace_calls"."wb_run_step")::text = $2::text)',
    );
    expect(where({ expr: { $and: [{ $convert: { input: field('inputs.x'), to: 'exists' } }] } }).sql).toBe(
      ' and ((jsonb_extract_path("trace_calls"."inputs", $2::text) is not null))',
    );
    expect(where({ expr: { $eq: [{ $convert: { input: field('inputs.ok'), to: 'bool' } }, lit(false)] } }).sql).toContain(
      `when 'false' then false end) = $3::boolean)`,
    );
    expect(where({ expr: { $eq: [{ $convert: { input: lit('3.5'), to: 'double' } }, lit(3.5)] } }).params).toEqual(['3.5', '3.5', '3.5', '3.5', 3.5]);
  });

  it('derives summary.weave.status from exception, status counts and end', () => {
    const { sql: text, params } = where({ expr: { $eq: [field('summary.weave.status'), lit('running')] } });
    expect(text).toContain(`when "trace_calls"."exception" is not null then 'error'`);
    expect(text).toContain(`then 'descendant_error' when "trace_calls"."ended_at" is null then 'running' else 'success' end) = $2::text)`);
    expect(params).toEqual(['running']);
  });

  it('derives summary.weave.latency_ms and trace_name', () => {
    expect(where({ expr: { $gt: [field('summary.weave.latency_ms'), lit(100)] } }).sql).toBe(
      ' and (floor(extract(epoch from ("trace_calls"."ended_at" - "trace_calls"."started_at")) * 1000) > $2::numeric)',
    );
    expect(where({ expr: { $eq: [field('summary.weave.trace_name'), lit('f')] } }).sql).toContain(
      `coalesce(nullif("trace_calls"."display_name", ''), substring("trace_calls"."op_name" from '^weave:///[^/]+/[^/]+/op/([^/:]+):'), "trace_calls"."op_name")`,
    );
  });

  it('rejects an empty $and', () => {
    expect(() => where({ expr: { $and: [] } })).toThrow(InvalidRequestError);
  });

  it('rejects ordering comparisons with null', () => {
    expect(() => where({ expr: { $gt: [field('id'), lit(null)] } })).toThrow(InvalidRequestError);
  });

  it('rejects malformed queries with a 400', () => {
    expect(() => parseQuery({ $expr: { $eq: [field('id')] } })).toThrow(InvalidRequestError);
    expect(() => parseQuery({ $expr: { $eq: [field('id'), lit(1)], $gt: [field('id'), lit(1)] } })).toThrow(InvalidRequestError);
    expect(() => parseQuery({ $expr: { $eq: [field('id'), lit(1)] }, extra: 1 })).toThrow(InvalidRequestError);
    expect(() => parseQuery({ $expr: { $regex: [field('id'), lit('.')] } })).toThrow(InvalidRequestError);
    expect(() => parseQuery({ $expr: field('id') })).toThrow(/not a valid operation/);
  });
});

describe('field validation and injection', () => {
  it('rejects unknown columns with an invalid-field 403', () => {
    expect(() => where({ expr: { $eq: [field('password'), lit('x')] } })).toThrow(InvalidFieldError);
    const error = (() => {
      try {
        where({ expr: { $eq: [field('id; drop table trace_calls'), lit('x')] } });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(ForbiddenError);
    expect((error as ForbiddenError).statusCode).toBe(403);
  });

  it('rejects underived summary.weave fields, empty segments and control characters', () => {
    for (const path of ['summary.weave.costs', 'inputs..a', 'inputs.a\u0000b', 'inputs.', `inputs.${'a.'.repeat(40)}a`]) {
      expect(() => where({ expr: { $eq: [field(path), lit('x')] } })).toThrow(InvalidFieldError);
    }
  });

  it('binds hostile path segments and values instead of writing them into SQL', () => {
    const hostile = `x') or 1=1; drop table trace_calls; --`;
    const { sql: text, params } = where({ expr: { $eq: [field(`inputs.${hostile}`), lit(hostile)] } });
    expect(text).not.toContain('drop table');
    expect(params).toEqual([hostile, hostile]);
  });

  it('binds hostile filter values', () => {
    const hostile = `'; delete from trace_calls; --`;
    const { sql: text, params } = where({ filter: { call_ids: [hostile], op_names: [`${hostile}:*`] } });
    expect(text).not.toContain('delete');
    expect(params).toEqual([`'; delete from trace\\_calls; --:%`, hostile]);
  });
});

describe('calls sort', () => {
  it('orders by started_at then id by default', () => {
    expect(orderBy().sql).toBe('"trace_calls"."started_at" asc, "trace_calls"."id" asc');
  });

  it('orders columns with missing values last in either direction', () => {
    expect(orderBy([{ field: 'ended_at', direction: 'desc' }]).sql).toBe('"trace_calls"."ended_at" desc nulls last, "trace_calls"."id" asc');
  });

  it('orders a JSON path by its number, then its text', () => {
    const { sql: text, params } = orderBy([{ field: 'summary.usage.tokens', direction: 'desc' }]);
    expect(text).toMatch(/^\(case .* end\) desc nulls last, \(jsonb_extract_path\("trace_calls"."summary", \$\d+::text, \$\d+::text\) #>> '\{\}'\) collate "C" desc nulls last, "trace_calls"."id" asc$/);
    expect(params).toEqual(Array(9).fill(['usage', 'tokens']).flat());
  });

  it('does not add id twice, and sorts text in byte order', () => {
    expect(orderBy([{ field: 'id', direction: 'desc' }]).sql).toBe('("trace_calls"."id") collate "C" desc');
  });

  it('rejects a bad direction and an unknown field', () => {
    expect(() => orderBy([{ field: 'id', direction: 'up' }])).toThrow(InvalidRequestError);
    expect(() => orderBy([{ field: 'id desc; --', direction: 'asc' }])).toThrow(InvalidFieldError);
  });
});
