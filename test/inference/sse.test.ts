import { describe, expect, it } from 'vitest';
import { SseParser } from '../helpers/sse-parser.js';

const bytes = (text: string) => Buffer.from(text, 'utf8');

describe('SseParser', () => {
  it('returns every complete event of a chunk', () => {
    const parser = new SseParser();
    expect(parser.push(bytes('data: {"a":1}\n\ndata: [DONE]\n\n'))).toEqual([
      { event: undefined, data: '{"a":1}' },
      { event: undefined, data: '[DONE]' },
    ]);
  });

  it('joins an event split across chunks', () => {
    const parser = new SseParser();
    expect(parser.push(bytes('data: {"a"'))).toEqual([]);
    expect(parser.push(bytes(':1}\n'))).toEqual([]);
    expect(parser.push(bytes('\n'))).toEqual([{ event: undefined, data: '{"a":1}' }]);
  });

  it('joins a multi-byte character split across chunks', () => {
    const parser = new SseParser();
    const whole = bytes('data: "é"\n\n');
    expect([...parser.push(whole.subarray(0, 8)), ...parser.push(whole.subarray(8))]).toEqual([{ event: undefined, data: '"é"' }]);
  });

  it('accepts CRLF line endings, also split between chunks', () => {
    const parser = new SseParser();
    expect([...parser.push(bytes('data: x\r')), ...parser.push(bytes('\n\r\n'))]).toEqual([{ event: undefined, data: 'x' }]);
  });

  it('skips comments and reads the event field', () => {
    const parser = new SseParser();
    expect(parser.push(bytes(': ping\n\nevent: error\ndata: {"e":1}\n\n'))).toEqual([{ event: 'error', data: '{"e":1}' }]);
  });
});
