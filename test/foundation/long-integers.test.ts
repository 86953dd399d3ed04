import { describe, expect, it } from 'vitest';
import { RequestValidationError } from '../../src/http/validation.js';
import { MARK, mayHoldLongInteger, parseWithLongIntegers, unmarkLongIntegers } from '../../src/http/long-integers.js';

const digits = (d: string) => `<${d}>`;

describe('integer literals a double would change', () => {
  it('are found by the quick test, which floats and shorter integers do not trip', () => {
    for (const text of ['9007199254740993', '[-9007199254740993]', '{"a": 12345678901234567890}', '"1234567890123456"']) expect(mayHoldLongInteger(text), text).toBe(true);
    for (const text of ['0.30000000000000004', '{"a": 1.2345678901234567e+300}', '[900719925474099, 1e-5]', '{"t": 1.7320508075688772}']) {
      expect(mayHoldLongInteger(text), text).toBe(false);
    }
  });

  it('are read whole, and only outside strings, whatever backslashes and quotes the strings hold', () => {
    const cases: [string, unknown][] = [
      ['{"a":"x\\\\","b":12345678901234567890}', { a: 'x\\', b: '<12345678901234567890>' }],
      ['{"a":"x\\"12345678901234567890"}', { a: 'x"12345678901234567890' }],
      ['{"a":"\\\\\\"","b":[-9007199254740993,9007199254740991,1.5e300]}', { a: '\\"', b: ['<-9007199254740993>', 9007199254740991, 1.5e300] }],
      ['{"12345678901234567890":12345678901234567890}', { '12345678901234567890': '<12345678901234567890>' }],
    ];
    for (const [text, value] of cases) expect(parseWithLongIntegers(text, digits).value, text).toEqual(value);
  });

  it('leave invalid JSON to the parser, which reports it as before', () => {
    for (const text of ['{"a":12345678901234567890', '{"a":"12345678901234567890}', '[12345678901234567890,]']) {
      expect(() => parseWithLongIntegers(text, digits), text).toThrow(RequestValidationError);
    }
  });

  it('are written back as their digits from the marked strings JSON.stringify writes, and strings stay strings', () => {
    const { value } = parseWithLongIntegers('{"a":[12345678901234567890,"12345678901234567890"]}', (d) => ({ toJSON: () => `${MARK}${d}` }));
    expect(unmarkLongIntegers(JSON.stringify(value))).toBe('{"a":[12345678901234567890,"12345678901234567890"]}');
  });
});
