import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/errors.js';
import { extractRefs, formatRef, isWeaveRef, parseRef, quote, refProjectId } from '../../src/tracing/refs.js';

describe('parseRef', () => {
  it('parses an object ref', () => {
    expect(parseRef('weave:///e/p/object/my-ds:abc123')).toEqual({
      kind: 'object', entity: 'e', project: 'p', name: 'my-ds', digest: 'abc123', path: [],
    });
  });

  it('parses an op ref with a dotted method name', () => {
    const ref = parseRef('weave:///my-entity/my-project/op/Evaluation.predict_and_score:Uk1c');
    expect(ref).toMatchObject({ kind: 'op', name: 'Evaluation.predict_and_score', digest: 'Uk1c' });
  });

  it('parses the dataset row ref the JS SDK emits', () => {
    expect(parseRef('weave:///e/p/object/my-ds:d1/attr/rows/id/r1').path).toEqual([
      { edge: 'attr', value: 'rows' },
      { edge: 'id', value: 'r1' },
    ]);
  });

  it('parses a table ref with a row id', () => {
    expect(parseRef('weave:///e/p/table/6b22/id/zlx')).toEqual({
      kind: 'table', entity: 'e', project: 'p', digest: '6b22', path: [{ edge: 'id', value: 'zlx' }],
    });
  });

  it('parses a call ref', () => {
    expect(parseRef('weave:///e/p/call/01a203e5-5054-7346')).toMatchObject({ kind: 'call', id: '01a203e5-5054-7346' });
  });

  it('accepts the any-version digest used by filters', () => {
    expect(parseRef('weave:///e/p/op/outer:*')).toMatchObject({ name: 'outer', digest: '*' });
  });

  it('decodes percent-encoded names and edge values', () => {
    const ref = parseRef('weave:///e/p/object/a%20b:d/key/x%2Fy/index/0');
    expect(ref).toMatchObject({ name: 'a b', path: [{ edge: 'key', value: 'x/y' }, { edge: 'index', value: '0' }] });
  });

  it.each([
    ['another scheme', 'weave-trace-internal:///abc/object/x:d'],
    ['too few parts', 'weave:///e/p/object'],
    ['an empty entity', 'weave:////p/object/x:d'],
    ['an unknown kind', 'weave:///e/p/dataset/x:d'],
    ['an object without a digest', 'weave:///e/p/object/x'],
    ['an object with two colons', 'weave:///e/p/object/x:d:e'],
    ['an odd path', 'weave:///e/p/object/x:d/key'],
    ['an unknown edge', 'weave:///e/p/object/x:d/field/a'],
    ['a non-integer index', 'weave:///e/p/object/x:d/index/a'],
    ['bad percent-encoding', 'weave:///e/p/object/x%zz:d'],
  ])('rejects %s', (_what, uri) => {
    expect(() => parseRef(uri)).toThrow(InvalidRequestError);
  });
});

describe('formatRef', () => {
  it('round-trips refs of every kind', () => {
    for (const uri of [
      'weave:///e/p/object/my-ds:abc/attr/rows/id/r1',
      'weave:///e/p/op/Model.predict:abc',
      'weave:///e/p/table/6b22/id/zlx',
      'weave:///e/p/call/01a2',
      'weave:///e/p/object/a%20b:d/key/x%2Fy',
    ]) {
      expect(formatRef(parseRef(uri))).toBe(uri);
    }
  });

  it('encodes as Python quote with no safe characters', () => {
    expect(quote("a b/c:d!'()*~._-é")).toBe('a%20b%2Fc%3Ad%21%27%28%29%2A~._-%C3%A9');
  });

  it('names the project a ref points into', () => {
    expect(refProjectId(parseRef('weave:///ent/proj/call/1'))).toBe('ent/proj');
  });

  it('recognises ref strings', () => {
    expect(isWeaveRef('weave:///e/p/call/1')).toBe(true);
    expect(isWeaveRef('https://example.com')).toBe(false);
    expect(isWeaveRef(3)).toBe(false);
  });
});

describe('extractRefs', () => {
  it('finds each distinct ref string at any depth', () => {
    const inputs = {
      self: 'weave:///e/p/object/m:1',
      example: { rows: ['weave:///e/p/table/t', 'plain', { deep: 'weave:///e/p/object/m:1' }] },
      n: 3,
      none: null,
    };
    expect(extractRefs(inputs)).toEqual(['weave:///e/p/object/m:1', 'weave:///e/p/table/t']);
  });

  it('finds a ref that is the whole value', () => {
    expect(extractRefs('weave:///e/p/call/1')).toEqual(['weave:///e/p/call/1']);
    expect(extractRefs(null)).toEqual([]);
  });
});
