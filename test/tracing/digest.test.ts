import fc from 'fast-check';
import { LosslessNumber } from 'lossless-json';
import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/errors.js';
import {
  bytesDigest,
  canonicalJson,
  fileDigest,
  objectDigest,
  pythonFloat,
  rowDigest,
  tableDigest,
} from '../../src/tracing/digest.js';
import { parseLossless, toPlainJson } from '../../src/tracing/json.js';

describe('reference test vectors', () => {
  const body = '{"b":1,"a":[1.0,"x"],"c":"é"}';

  it('writes the sorted canonical text of the reference object', () => {
    expect(canonicalJson(parseLossless(body))).toBe('{"a": [1.0, "x"], "b": 1, "c": "\\u00e9"}');
  });

  it('gives the reference object digest for the sorted form', () => {
    expect(objectDigest(parseLossless(body))).toBe('GPcXMCf7M26iQyy3KRSxCKANFPKXnkIauYsAkXfYYY0');
  });

  it('gives the reference digest for the unsorted text', () => {
    expect(bytesDigest('{"b": 1, "a": [1.0, "x"], "c": "\\u00e9"}')).toBe('PSs2BzMj5Zxamp8oerXABquQNBL9gBoF878627WDjaM');
  });

  it('gives the file digest the JS client computes for an op source', () => {
    const source = 'async function evaluate(evaluation, model) {\n    // internal function\n}';
    expect(fileDigest(new TextEncoder().encode(source))).toBe('3OUF6UTy5teWXJ6xECCbfG8dmXXEkazBTpQfX19lwWM');
  });

  it('gives the reference row digests and hex table digest', () => {
    const rows = parseLossless('[{"a":1,"b":"x"},{"a":2,"b":"y"}]') as unknown[];
    const digests = rows.map(rowDigest);
    expect(digests).toEqual(['zlxib7QDB0J88yO1wwej6iMIVvpLrWduqqJXe1qFeoU', 'aOKgoWuvTKTF7UCq5BFm75w7srj72lul43xQpqXX1Fo']);
    expect(tableDigest(digests)).toBe('6b228fced812d62e4bd62387f89ac293f2f35a5b6dd8fcdd336fb988405149ad');
  });

  it('gives the SHA-256 of nothing for an empty table', () => {
    expect(tableDigest([])).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });
});

describe('canonical JSON', () => {
  it('keeps a float literal distinct from an int literal', () => {
    expect(objectDigest(parseLossless('{"x": 1.0}'))).not.toBe(objectDigest(parseLossless('{"x": 1}')));
    expect(canonicalJson(parseLossless('[1.0, 1, 1e5, 1E-7, -0, -0.0, 2.50]'))).toBe('[1.0, 1, 100000.0, 1e-07, 0, -0.0, 2.5]');
  });

  it('prints integers beyond float precision exactly', () => {
    expect(canonicalJson(parseLossless('[123456789012345678901234567890]'))).toBe('[123456789012345678901234567890]');
  });

  it('gives plain JavaScript values the same digest as their lossless parse when they hold no floats', () => {
    const text = '{"z": [1, 2, {"q": null, "p": true}], "a": "s"}';
    expect(objectDigest(JSON.parse(text))).toBe(objectDigest(parseLossless(text)));
  });

  it('formats floats as Python repr does', () => {
    const cases: [number, string][] = [
      [1e16, '1e+16'],
      [1e15, '1000000000000000.0'],
      [0.0001, '0.0001'],
      [0.00001, '1e-05'],
      [1.5e300, '1.5e+300'],
      [0.1 + 0.2, '0.30000000000000004'],
      [-0, '-0.0'],
      [5e-324, '5e-324'],
      [12345678901234567, '1.2345678901234568e+16'],
      [Infinity, 'Infinity'],
      [-Infinity, '-Infinity'],
      [NaN, 'NaN'],
    ];
    for (const [value, text] of cases) expect(pythonFloat(value)).toBe(text);
  });

  it('escapes non-ASCII, control and astral characters as Python ensure_ascii does', () => {
    expect(canonicalJson('é"\\\n\t\u0001\u007f😀')).toBe('"\\u00e9\\"\\\\\\n\\t\\u0001\\u007f\\ud83d\\ude00"');
  });

  it('sorts keys by code point, not by UTF-16 unit', () => {
    // U+FF01 sorts after U+1F600 in UTF-16 units but before it in code points.
    expect(canonicalJson({ '😀': 1, '！': 2 })).toBe('{"\\uff01": 2, "\\ud83d\\ude00": 1}');
  });

  it('writes empty containers and literals as Python does', () => {
    expect(canonicalJson({ a: [], b: {}, c: null, d: false })).toBe('{"a": [], "b": {}, "c": null, "d": false}');
  });

  it('gives equal digests to equal values whatever their key order', () => {
    const json = fc.jsonValue();
    fc.assert(
      fc.property(json, (value) => {
        const reversed = reverseKeys(value);
        expect(objectDigest(reversed)).toBe(objectDigest(value));
        const text = JSON.stringify(value);
        expect(objectDigest(parseLossless(JSON.stringify(reversed)))).toBe(objectDigest(parseLossless(text)));
      }),
    );
  });
});

describe('lossless parsing', () => {
  it('keeps the source text of numbers', () => {
    const value = parseLossless('{"n": 1.50}') as { n: LosslessNumber };
    expect(value.n.value).toBe('1.50');
  });

  it('keeps the last value of a repeated key, as Python does', () => {
    expect(toPlainJson(parseLossless('{"a": 1, "a": 2}'))).toEqual({ a: 2 });
  });

  it('rejects malformed JSON as an invalid request', () => {
    expect(() => parseLossless('{"a": ')).toThrow(InvalidRequestError);
  });

  it('converts lossless values to plain JSON', () => {
    expect(toPlainJson(parseLossless('{"a": [1.0, 2.5, "x", null, {"b": true}]}'))).toEqual({ a: [1, 2.5, 'x', null, { b: true }] });
  });
});

function reverseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reverseKeys);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).reverse().map(([k, v]) => [k, reverseKeys(v)]));
  }
  return value;
}
