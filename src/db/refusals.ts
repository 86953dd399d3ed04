/**
 * What PostgreSQL refuses of a request's values: the client's doing, answered as a client error (never a
 * 500). Schemas and checks bound what they can; these name what is left.
 */

/**
 * A character PostgreSQL cannot store in text or jsonb: U+0000, or a UTF-16 surrogate without its pair
 * (not Unicode text; jsonb refuses its escape). A surrogate pair is fine.
 */
export const UNSTORABLE_CHARACTER = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The SQLSTATE of a database error, if it is one. */
export function sqlState(error: unknown): string | undefined {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * A value the database refuses: a data exception (class 22: out of range, NUL bytes, bad encoding) or a
 * value too large to index (54000).
 */
export function isRefusedValue(error: unknown): boolean {
  const state = sqlState(error);
  return state !== undefined && (state.startsWith('22') || state === '54000');
}
