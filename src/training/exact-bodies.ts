import type { FastifyInstance } from 'fastify';
import { decodeJsonText } from '../http/body-encoding.js';
import { holdBigInts, MARK, parseWithExactNumbers, restoreHeld, unmarkNumbers, type HeldValue } from '../http/exact-numbers.js';
import { walkJson } from '../http/json-body.js';
import { RequestValidationError, type ValidationDetail } from '../http/validation.js';

/**
 * What clients log is stored as they wrote it. JSON.parse reads every number as a double, so an integer
 * beyond 2^53 in a trajectory (a 64-bit id or hash in its metadata, a bound in a tool's schema) would be
 * stored, trained on and read back as another integer. Training bodies are read with such integers kept
 * (http/exact-numbers.ts): validation sees the nearest double, `request.heldIntegers` says where the exact
 * value was, and the stored JSON text has its digits (`exactJsonTexts`). JSONB keeps them, the worker's input
 * stream hands its text on, and the rollouts page writes them back (`parseStoredJson`, `unmarkResponse`).
 *
 * A number no double holds (`1e400`, which JSON.parse reads as Infinity and JSON.stringify writes as null)
 * is refused with a 422 `finite_number` at its place instead of being stored as something else.
 * Whole floats (`1.0`) are read as the integers they equal, as before.
 */
export function registerTrainingJsonParser(app: FastifyInstance): void {
  // As registerJsonBodyParser (http/json-body.ts) with `rejectNul`, whose text/plain refusal this keeps.
  if (app.hasContentTypeParser('application/json')) app.removeContentTypeParser('application/json');
  if (app.hasContentTypeParser('text/plain')) app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      const text = decodeJsonText(request, body as Buffer, 'json_invalid');
      const { value, exact, large } = parseWithExactNumbers(text, BigInt, { rejectNul: true });
      if (large) refuseInfinities(value);
      if (exact) request.heldIntegers = holdBigInts(value);
      done(null, value);
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}

/**
 * Refuses the infinities JSON.parse makes of literals too large for a double (integers are held exactly):
 * a 422 `finite_number` at each, in the body's order.
 */
export function refuseInfinities(body: unknown): void {
  const details: ValidationDetail[] = [];
  const refuse = (value: unknown, path: readonly (string | number)[]): void => {
    if (typeof value === 'number' && !Number.isFinite(value)) details.push({ type: 'finite_number', loc: ['body', ...path], msg: 'Input should be a finite number', input: String(value) });
  };
  refuse(body, []);
  // One shared path, copied only into a refusal's `loc`.
  walkJson(body, (value, path) => refuse(value, path));
  if (details.length > 0) throw new RequestValidationError(details);
}

/**
 * The JSON text of each of a validated body's `items` (its field `field`), with the integers held out of
 * them written as the client wrote them.
 */
export function exactJsonTexts(items: readonly unknown[], field: string, held: readonly HeldValue<bigint>[] | undefined): string[] {
  const byItem = new Map<number, HeldValue<string>[]>();
  for (const { path, value } of held ?? []) {
    const index = path[1];
    if (path[0] !== field || typeof index !== 'number' || path.length < 3) continue;
    const list = byItem.get(index) ?? [];
    list.push({ path: path.slice(2), value: `${MARK}${value}` });
    byItem.set(index, list);
  }
  return items.map((item, index) => {
    const exact = byItem.get(index);
    if (!exact) return JSON.stringify(item);
    const copy = structuredClone(item);
    restoreHeld(copy, exact);
    return unmarkNumbers(JSON.stringify(copy));
  });
}

/** A stored JSON text parsed with its integers beyond 2^53 as marked strings, which `unmarkResponse` writes back as digits. */
export function parseStoredJson(text: string): unknown {
  return parseWithExactNumbers(text, (literal) => `${MARK}${literal}`, { plain: true }).value;
}

/** An onSend hook for routes that answer `parseStoredJson` values. */
export async function unmarkResponse(_request: unknown, _reply: unknown, payload: unknown): Promise<unknown> {
  return typeof payload === 'string' ? unmarkNumbers(payload) : payload;
}
