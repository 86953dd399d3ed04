import { describe, expect, it } from 'vitest';
import { holdBigInts } from '../../src/http/exact-numbers.js';
import { parseJsonBody, unstorableStringAt, walkJson } from '../../src/http/json-body.js';
import { RequestValidationError } from '../../src/http/validation.js';
import { refuseInfinities } from '../../src/training/exact-bodies.js';

/**
 * The walks of parsed bodies (the NUL and surrogate refusals, the held big integers, the refused
 * infinities) keep one path for the whole walk and copy it only for what they report. Copying it at every
 * value made a body a few thousand levels deep cost seconds (depth × values); a recursive walk could not
 * go deeper than the call stack. Bodies are walked before the schemas bound their depth, so a walk takes
 * any depth. These tests count and compare, never time.
 */

/** `leaf` under `depth` levels, alternating arrays (index 0) and objects (key `k`), and the path to it. */
function chain(depth: number, leaf: unknown): { value: unknown; path: (string | number)[] } {
  let value = leaf;
  const path: (string | number)[] = [];
  for (let level = 0; level < depth; level++) {
    if (level % 2 === 0) {
      value = [value];
      path.push(0);
    } else {
      value = { k: value };
      path.push('k');
    }
  }
  return { value, path: path.reverse() };
}

/** What a recursive walk visits, in its order: each nested value with a copy of its path. */
function recursiveVisits(value: unknown, path: (string | number)[] = [], out: [unknown, (string | number)[]][] = []) {
  if (value === null || typeof value !== 'object') return out;
  const keys: (string | number)[] = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
  for (const key of keys) {
    const item = (value as Record<string | number, unknown>)[key];
    out.push([item, [...path, key]]);
    recursiveVisits(item, [...path, key], out);
  }
  return out;
}

const DEEP = 100_000;

/** The error `run` throws (undefined when it throws none). */
function caught(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('walkJson', () => {
  const sample = { a: [1, 'x', { b: null, c: [true, { d: 2n }] }], e: {}, f: [[], [[3]]], g: 'y' };

  it('visits each nested value once, in a recursive walk\'s order, with the parent holding it', () => {
    const visits: [unknown, (string | number)[]][] = [];
    walkJson(sample, (value, path, parent) => {
      expect(parent[path[path.length - 1]]).toBe(value);
      visits.push([value, [...path]]);
    });
    expect(visits).toEqual(recursiveVisits(sample));
  });

  it('hands every visit the same path array: no value costs a copy of its path', () => {
    const paths = new Set<unknown>();
    let visits = 0;
    walkJson(sample, (_value, path) => {
      paths.add(path);
      visits++;
    });
    expect(visits).toBe(recursiveVisits(sample).length);
    expect(paths.size).toBe(1);
  });

  it('stops when the visitor answers true', () => {
    const seen: unknown[] = [];
    expect(walkJson([1, [2, 3], 4], (value) => (seen.push(value), value === 2))).toBe(true);
    expect(seen).toEqual([1, [2, 3], 2]);
    expect(walkJson([1], () => false)).toBe(false);
    expect(walkJson('scalar', () => true)).toBe(false);
  });

  it('walks a value deeper than the call stack, one visit per level', () => {
    const { value, path } = chain(DEEP, 'leaf');
    let visits = 0;
    let deepest: (string | number)[] = [];
    walkJson(value, (item, at) => {
      visits++;
      if (item === 'leaf') deepest = [...at];
    });
    expect(visits).toBe(DEEP);
    expect(deepest).toEqual(path);
  });
});

describe('the walks built on it find what they found, at any depth', () => {
  it('unstorableStringAt and rejectNul name the string deep in a body', () => {
    const { value, path } = chain(DEEP, 'a\u0000b');
    expect(unstorableStringAt(value)).toEqual(path);
    expect(unstorableStringAt(chain(DEEP, 'fine').value)).toBeUndefined();
    // The first string or key holding one, keys before what they hold.
    expect(unstorableStringAt({ a: ['ok', { 'k\ud800': 'x\u0000' }], b: '\u0000' })).toEqual(['a', 1, 'k\ud800']);
    expect(unstorableStringAt('\udc00')).toEqual([]);
  });

  it('parseJsonBody walks a deep body whose `\\u0000` is an escaped backslash\'s, and refuses a real one at its place', () => {
    const open = '['.repeat(DEEP);
    const close = ']'.repeat(DEEP);
    expect(() => parseJsonBody(`${open}"\\\\u0000"${close}`, { rejectNul: true })).not.toThrow();
    const refused = caught(() => parseJsonBody(`${open}"\\u0000"${close}`, { rejectNul: true }));
    expect(refused).toBeInstanceOf(RequestValidationError);
    const [detail] = (refused as RequestValidationError).detail;
    expect(detail.type).toBe('string_nul');
    expect(detail.loc).toEqual(['body', ...Array<number>(DEEP).fill(0)]);
  });

  it('holdBigInts holds each big integer deep in a body, in order, each with a path of its own', () => {
    const { value, path } = chain(DEEP, 2n ** 64n);
    const held = holdBigInts(value);
    expect(held).toEqual([{ path, value: 2n ** 64n }]);
    let leaf: unknown = value;
    for (const key of path) leaf = (leaf as Record<string | number, unknown>)[key];
    expect(leaf).toBe(2 ** 64);

    const body = { a: [1n, { b: 2n }], c: 3n };
    const stood: (string | number)[][] = [];
    const order = holdBigInts(body, (big, at) => (stood.push(at), Number(big) * 10));
    expect(order.map((h) => h.path)).toEqual([['a', 0], ['a', 1, 'b'], ['c']]);
    expect(stood).toEqual([['a', 0], ['a', 1, 'b'], ['c']]);
    // `stand` sees the very path that is held, and no two held values share one.
    expect(stood.every((at, i) => at === order[i].path)).toBe(true);
    expect(body).toEqual({ a: [10, { b: 20 }], c: 30 });
    expect(holdBigInts(5n)).toEqual([{ path: [], value: 5n }]);
  });

  it('refuseInfinities refuses each infinity deep in a body at its place, in order', () => {
    const { value, path } = chain(DEEP, -Infinity);
    expect(() => refuseInfinities(value)).toThrow(RequestValidationError);
    const refused = caught(() => refuseInfinities({ a: [Infinity, 1, { b: -Infinity }], deep: value }));
    expect(refused).toBeInstanceOf(RequestValidationError);
    expect((refused as RequestValidationError).detail.map((d) => [d.loc, d.input])).toEqual([
      [['body', 'a', 0], 'Infinity'],
      [['body', 'a', 2, 'b'], '-Infinity'],
      [['body', 'deep', ...path], '-Infinity'],
    ]);
    expect(() => refuseInfinities(chain(DEEP, 1e308).value)).not.toThrow();
    expect(() => refuseInfinities(Infinity)).toThrow(expect.objectContaining({ detail: [expect.objectContaining({ loc: ['body'] })] }));
  });
});
