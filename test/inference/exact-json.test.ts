import { describe, expect, it } from 'vitest';
import { coerceLaxFields, holdIntegers, laxScalar, parseExactJson, restoreHeld, stringifyExact } from '../../src/inference/exact-json.js';
import { LAX_FIELDS } from '../../src/inference/schemas.js';

describe('exact integers', () => {
  it('round-trips integer literals a double would change, and only those', () => {
    const text = '{"a":9223372036854775807,"b":[-9007199254740993,1.5e300,12345678901234567.5],"c":"9999999999999999999","d":9007199254740991}';
    const { value, exact } = parseExactJson(text);
    expect(exact).toBe(true);
    expect(value).toEqual({ a: 9223372036854775807n, b: [-9007199254740993n, 1.5e300, 12345678901234567.5], c: '9999999999999999999', d: 9007199254740991 });
    expect(stringifyExact(value)).toBe('{"a":9223372036854775807,"b":[-9007199254740993,1.5e+300,12345678901234568],"c":"9999999999999999999","d":9007199254740991}');
  });

  it('parses bodies without long digit runs natively', () => {
    expect(parseExactJson('{"seed":42,"s":"a\\"1234567890123456789"}')).toEqual({ value: { seed: 42, s: 'a"1234567890123456789' }, exact: false, plain: true });
  });

  it('holds BigInts out of validation and puts them back', () => {
    const body = { seed: 9223372036854775807n, tools: [{ parameters: { maximum: 18446744073709551615n } }] };
    const held = holdIntegers(body);
    expect(body).toEqual({ seed: Number.MAX_SAFE_INTEGER, tools: [{ parameters: { maximum: 18446744073709551615 } }] });
    restoreHeld(body, held);
    expect(body).toEqual({ seed: 9223372036854775807n, tools: [{ parameters: { maximum: 18446744073709551615n } }] });
  });
});

describe('lax scalars', () => {
  it('coerces as pydantic does in lax mode', () => {
    expect(laxScalar('16', 'int')).toBe(16);
    expect(laxScalar(' 16 ', 'int')).toBe(16);
    expect(laxScalar('16.0', 'int')).toBe(16);
    expect(laxScalar('16.5', 'int')).toBe('16.5');
    expect(laxScalar('9223372036854775807', 'int')).toBe(9223372036854775807n);
    expect(laxScalar('0.5', 'float')).toBe(0.5);
    expect(laxScalar('YES', 'bool')).toBe(true);
    expect(laxScalar('off', 'bool')).toBe(false);
    expect(laxScalar(1, 'bool')).toBe(true);
    expect(laxScalar('maybe', 'bool')).toBe('maybe');
  });

  it('touches only the table\'s own fields, never inherited names', () => {
    const body: Record<string, unknown> = { max_tokens: '16', toString: '5', constructor: '1', unknown_field: '7' };
    coerceLaxFields(body, LAX_FIELDS);
    expect(body).toEqual({ max_tokens: 16, toString: '5', constructor: '1', unknown_field: '7' });
  });
});
