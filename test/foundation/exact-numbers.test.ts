import { describe, expect, it } from 'vitest';
import { RequestValidationError } from '../../src/http/validation.js';
import { MARK, MAX_INTEGER_DIGITS, parseWithExactNumbers, unmarkNumbers } from '../../src/http/exact-numbers.js';

const digits = (d: string) => `<${d}>`;

describe('integer literals a double would change', () => {
  it('are found wherever they are, and a text without one is answered as JSON.parse answers it', () => {
    for (const text of ['9007199254740993', '[-9007199254740993]', '{"a": 12345678901234567890}', '{"a":{"b":[1,[9007199254740992]]}}']) {
      expect(parseWithExactNumbers(text, digits).exact, text).toBe(true);
    }
    // `large`: a number at or beyond 2^53 was read as a double (a float's, here).
    const plain: [string, boolean][] = [
      ['"1234567890123456"', false],
      ['0.30000000000000004', false],
      ['{"a": 1.2345678901234567e+300}', true],
      ['[900719925474099, 1e-5]', false],
      ['{"t": 1.7320508075688772}', false],
      ['{"a":1e16}', true],
      ['{"a":[1,-1e400]}', true],
    ];
    for (const [text, large] of plain) {
      expect(parseWithExactNumbers(text, digits), text).toEqual({ value: JSON.parse(text), exact: false, large });
    }
  });

  it('are read whole, and only outside strings, whatever backslashes and quotes the strings hold', () => {
    const cases: [string, unknown][] = [
      ['{"a":"x\\\\","b":12345678901234567890}', { a: 'x\\', b: '<12345678901234567890>' }],
      ['{"a":"x\\"12345678901234567890"}', { a: 'x"12345678901234567890' }],
      ['{"a":"\\\\\\"","b":[-9007199254740993,9007199254740991,1.5e300]}', { a: '\\"', b: ['<-9007199254740993>', 9007199254740991, 1.5e300] }],
      ['{"12345678901234567890":12345678901234567890}', { '12345678901234567890': '<12345678901234567890>' }],
    ];
    for (const [text, value] of cases) expect(parseWithExactNumbers(text, digits).value, text).toEqual(value);
  });

  it('leave invalid JSON to the parser, which reports it as before', () => {
    for (const text of ['{"a":12345678901234567890', '{"a":"12345678901234567890}', '[12345678901234567890,]']) {
      expect(() => parseWithExactNumbers(text, digits), text).toThrow(RequestValidationError);
    }
  });

  it('are written back as their digits from the marked strings JSON.stringify writes, and strings stay strings', () => {
    const { value } = parseWithExactNumbers('{"a":[12345678901234567890,"12345678901234567890"]}', (d: string) => ({ toJSON: () => `${MARK}${d}` }));
    expect(unmarkNumbers(JSON.stringify(value))).toBe('{"a":[12345678901234567890,"12345678901234567890"]}');
  });

  it('are refused past 4,300 digits, as Python\'s json refuses them, at their position', () => {
    const at = `[${'9'.repeat(MAX_INTEGER_DIGITS)}]`;
    expect(parseWithExactNumbers(at, digits).value).toEqual([`<${'9'.repeat(MAX_INTEGER_DIGITS)}>`]);
    for (const [text, position] of [[`{"a": -${'9'.repeat(MAX_INTEGER_DIGITS + 1)}}`, 6], [`[1.5,${'1'.repeat(8_000_000)}]`, 5]] as const) {
      const count = text.replace(/[^\d]/g, '').length - (text.startsWith('[1.5') ? 2 : 0);
      let refused: unknown;
      try {
        parseWithExactNumbers(text, digits);
      } catch (error) {
        refused = error;
      }
      expect((refused as RequestValidationError).detail).toEqual([
        {
          type: 'json_invalid',
          loc: ['body', position],
          msg: 'JSON decode error',
          input: {},
          ctx: { error: `Exceeds the limit (4300 digits) for integer string conversion: value has ${count} digits` },
        },
      ]);
    }
    // A long float is a double like any other.
    expect(parseWithExactNumbers(`[${'1'.repeat(5000)}.5]`, digits)).toMatchObject({ exact: false });
  });

  it('leave whole floats to the double unless asked to keep them apart from integers', () => {
    const text = '{"a":[1.0,-2.50,1e+16,1.5e3,0.5,7]}';
    expect(parseWithExactNumbers(text, digits)).toEqual({ value: { a: [1, -2.5, 1e16, 1500, 0.5, 7] }, exact: false, large: true });
  });
});

describe('whole-valued float literals', () => {
  const keep = { wholeFloats: true };

  it('are found wherever a number ends, whatever spacing surrounds it', () => {
    for (const text of ['{"a":1.0}', '[0.00]', '-2.0', ' 1e+16 ', '{"a": -3.0 }', '[1, 2e+16]', '{"a":1.5E3}', '[7e0\n]']) {
      expect(parseWithExactNumbers(text, digits, keep).exact, text).toBe(true);
    }
  });

  it('leave other floats, integers, strings and negative exponents as JSON.parse reads them', () => {
    for (const text of ['{"a":1.05}', '{"a":[0.5, 2.25, 7, -1]}', '{"ref":"weave:///e/p/object/o:3e5f01"}', '{"v":"x:1.0", "n": 2}', '[1e-7, 10e-1, 1.0e-0]']) {
      expect(parseWithExactNumbers(text, digits, keep), text).toEqual({ value: JSON.parse(text), exact: false, large: false });
    }
  });

  it('are kept as <digits>.0, a form JSONB keeps, while other floats and safe integers stay doubles', () => {
    const cases: [string, unknown][] = [
      ['{"a":1.0,"b":-2.000,"c":0.0,"d":-0.0}', { a: '<1.0>', b: '<-2.0>', c: '<0.0>', d: '<-0.0>' }],
      ['[1e+16,1.5e+16,1E3,12.5e1,1e-7,0.5,3]', ['<10000000000000000.0>', '<15000000000000000.0>', '<1000.0>', '<125.0>', 1e-7, 0.5, 3]],
      // From 1e21 JSON.stringify writes an exponent, which JSONB spells out without a point.
      ['[1e+21,-1.5e+300,1000000000000000000000.0]', ['<1000000000000000000000.0>', `<-15${'0'.repeat(299)}.0>`, '<1000000000000000000000.0>']],
      ['{"s":"1.0","n":[1.0,12345678901234567890]}', { s: '1.0', n: ['<1.0>', '<12345678901234567890>'] }],
    ];
    for (const [text, value] of cases) expect(parseWithExactNumbers(text, digits, keep).value, text).toEqual(value);
  });

  it('are written back with their point from the marked strings JSON.stringify writes', () => {
    const { value, exact } = parseWithExactNumbers('{"a":[1.0,1e+16,2.5,"1.0"]}', (d: string) => ({ toJSON: () => `${MARK}${d}` }), keep);
    expect(exact).toBe(true);
    expect(unmarkNumbers(JSON.stringify(value))).toBe('{"a":[1.0,10000000000000000.0,2.5,"1.0"]}');
  });
});
