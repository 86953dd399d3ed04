import { PostgresQueryCompiler, type CompiledQuery, type QueryId, type RootOperationNode } from 'kysely';

/**
 * Bind parameters one statement may carry. The wire protocol counts them in 16 bits: PostgreSQL takes
 * up to 65,535, and PGlite's protocol parser reads the count as a signed 16-bit number, so 32,768 or
 * more corrupt its connection (every later query answers no rows). One limit for both.
 */
export const MAX_BIND_PARAMETERS = 32_767;

/** What multi-row writes aim for per statement, leaving room for the parameters around the rows. */
const PARAMETER_BUDGET = 30_000;

/** Splits rows into statements that stay under the parameter limit, given the parameters of one row. */
export function chunksForParameters<T>(items: readonly T[], parametersPerItem: number): T[][] {
  const size = Math.max(1, Math.floor(PARAMETER_BUDGET / Math.max(1, parametersPerItem)));
  const chunks: T[][] = [];
  for (let i = 0; i < items.length; i += size) chunks.push(items.slice(i, i + size));
  return chunks;
}

/** A statement with more parameters than the protocol carries; refused before it reaches the database. */
export class TooManyParametersError extends Error {
  constructor(readonly count: number) {
    super(`A statement with ${count} bind parameters was refused (at most ${MAX_BIND_PARAMETERS}).`);
    this.name = 'TooManyParametersError';
  }
}

/**
 * Compiles as PostgreSQL does and refuses statements past MAX_BIND_PARAMETERS: repositories chunk
 * and schemas bound what requests carry, and this keeps anything that slips past them an error of
 * one request rather than a corrupted connection.
 */
export class GuardedQueryCompiler extends PostgresQueryCompiler {
  override compileQuery(node: RootOperationNode, queryId: QueryId): CompiledQuery {
    const compiled = super.compileQuery(node, queryId);
    if (compiled.parameters.length > MAX_BIND_PARAMETERS) throw new TooManyParametersError(compiled.parameters.length);
    return compiled;
  }
}
