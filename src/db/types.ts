/**
 * One place where the two drivers are made to agree: `pg` returns int8 and numeric as strings,
 * PGlite returns int8 as a number. Both come out as JavaScript numbers here.
 */
export const INT8_OID = 20;
export const NUMERIC_OID = 1700;

/**
 * The types parsed as JavaScript numbers. The embedded database's worker thread (src/db/pglite-worker.ts)
 * builds its parsers from this list, since functions cannot be posted to it.
 */
export const NUMBER_TYPE_OIDS: readonly number[] = [INT8_OID, NUMERIC_OID];

export function parseNumeric(value: string): number {
  return Number(value);
}

export const typeParsers: Record<number, (value: string) => unknown> = Object.fromEntries(NUMBER_TYPE_OIDS.map((oid) => [oid, parseNumeric]));
