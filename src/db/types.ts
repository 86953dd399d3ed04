/**
 * One place where the two drivers are made to agree: `pg` returns int8 and numeric as strings,
 * PGlite returns int8 as a number. Both come out as JavaScript numbers here.
 */
export const INT8_OID = 20;
export const NUMERIC_OID = 1700;

export function parseNumeric(value: string): number {
  return Number(value);
}

export const typeParsers: Record<number, (value: string) => unknown> = {
  [INT8_OID]: parseNumeric,
  [NUMERIC_OID]: parseNumeric,
};
