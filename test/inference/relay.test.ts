import { describe, expect, it } from 'vitest';
import { StreamInterruptedError } from '../../src/inference/proxy/errors.js';
import { Cancel } from '../../src/inference/proxy/cancel.js';
import { modelRewriter, readUsage } from '../../src/inference/rewrite.js';
import { relayStream, type BodySink, type BodySource, type RelayOutcome } from '../../src/inference/stream.js';

const chunk = (content: string, extra = '') =>
  `data: {"id":"c-1","object":"chat.completion.chunk","created":1,"model":"team/p/agent:step3","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null}]${extra}}\n\n`;
const role = 'data: {"id":"c-1","object":"chat.completion.chunk","created":1,"model":"team/p/agent:step3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n';
const usage = 'data: {"id":"c-1","object":"chat.completion.chunk","created":1,"model":"team/p/agent:step3","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}\n\n';
const done = 'data: [DONE]\n\n';

async function* chunks(parts: (string | Error)[]): AsyncGenerator<Buffer> {
  for (const part of parts) {
    if (part instanceof Error) throw part;
    yield Buffer.from(part);
  }
}

/** An async iterable read into a sink, as the engine client's bodies are read. */
function iterableSource(iterable: AsyncIterable<Buffer>): BodySource {
  return {
    readInto(sink) {
      const iterator = iterable[Symbol.asyncIterator]();
      let resume: (() => void) | undefined;
      let paused = false;
      let stopped = false;
      void (async () => {
        try {
          for (;;) {
            if (paused) await new Promise<void>((wake) => (resume = wake));
            if (stopped) return;
            const next = await iterator.next();
            if (stopped) return;
            if (next.done) return sink.end();
            sink.data(next.value);
          }
        } catch (error) {
          if (!stopped) sink.error(error);
        }
      })();
      return {
        pause: () => (paused = true),
        resume: () => {
          paused = false;
          resume?.();
          resume = undefined;
        },
        abort: () => {
          stopped = true;
          resume?.();
          void iterator.return?.()?.catch(() => undefined);
        },
      };
    },
  };
}


const from = (parts: (string | Error)[]): BodySource => iterableSource(chunks(parts));

async function relay(parts: (string | Error)[], options: { clientWantsUsage?: boolean; rewrite?: boolean } = {}) {
  let outcome: RelayOutcome | undefined;
  const pieces: Buffer[] = [];
  const upstream = parts.map((p) => (typeof p === 'string' ? p : p));
  const stream = relayStream(from(upstream), {
    clientWantsUsage: options.clientWantsUsage ?? false,
    model: options.rewrite ? 'wandb-artifact:///team/p/agent' : undefined,
    signal: new Cancel(),
    onEnd: (o) => (outcome = o),
  });
  const writes: (Buffer | string)[] = [];
  for await (const piece of stream) {
    writes.push(piece);
    pieces.push(Buffer.from(piece));
  }
  return { text: Buffer.concat(pieces).toString(), outcome: outcome!, writes };
}

describe('relayStream', () => {
  it('passes whole events through unchanged and strips the usage chunk the client did not ask for', async () => {
    const { text, outcome } = await relay([role, chunk('Hel'), chunk('lo'), usage, done]);
    expect(text).toBe(role + chunk('Hel') + chunk('lo') + done);
    expect(outcome).toEqual({ usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 }, contentChunks: 2, disconnected: false, error: undefined });
  });

  it('keeps the usage chunk when the client asked for it', async () => {
    const { text } = await relay([role + chunk('a') + usage + done], { clientWantsUsage: true });
    expect(text).toBe(role + chunk('a') + usage + done);
  });

  it('reassembles events split across chunks, also inside a multi-byte character', async () => {
    const whole = role + chunk('héllo ✓') + done;
    const bytes = Buffer.from(whole);
    const cut = bytes.indexOf(Buffer.from('✓')) + 1;
    const parts = [bytes.subarray(0, 10), bytes.subarray(10, cut), bytes.subarray(cut)].map((b) => b.toString('latin1'));
    async function* raw(): AsyncGenerator<Buffer> {
      for (const p of parts) yield Buffer.from(p, 'latin1');
    }
    const pieces: Buffer[] = [];
    for await (const piece of relayStream(iterableSource(raw()), { clientWantsUsage: false, signal: new Cancel(), onEnd: () => undefined })) pieces.push(Buffer.from(piece));
    expect(Buffer.concat(pieces).toString()).toBe(whole);
  });

  it('reads CRLF-framed events', async () => {
    const { text } = await relay([role.replace(/\n/g, '\r\n'), chunk('x').replace(/\n/g, '\r\n'), 'data: [DONE]\r\n\r\n']);
    expect(text).toBe(role + chunk('x') + done);
  });

  it('writes the client\'s model id into every chunk', async () => {
    const { text } = await relay([role, chunk('a'), usage, done], { rewrite: true, clientWantsUsage: true });
    expect(text).not.toContain('agent:step3');
    expect(text.match(/"model":"wandb-artifact:\/\/\/team\/p\/agent"/g)).toHaveLength(3);
  });

  it('adds [DONE] when the engine ended without it', async () => {
    const { text } = await relay([role, chunk('a')]);
    expect(text.endsWith(chunk('a') + done)).toBe(true);
  });

  it('turns a failure after the first byte into an error event and [DONE]', async () => {
    const { text, outcome } = await relay([role, chunk('a'), new StreamInterruptedError('The engine broke off', 'replica http://10.0.0.7:8000 of backend main broke off', { timeout: false })]);
    expect(text).toBe(`${role}${chunk('a')}data: {"error":{"message":"The engine broke off","type":"server_error","param":null,"code":"upstream_error"}}\n\n${done}`);
    expect(outcome).toMatchObject({ error: { status: 502, code: 'upstream_error' }, contentChunks: 1, usage: undefined });
  });

  it('rewrites an engine\'s own error event into the OpenAI envelope with a string code', async () => {
    const error = 'data: {"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}\n\n';
    const { text, outcome } = await relay([role, error, done]);
    expect(text).toBe(
      role + 'data: {"error":{"message":"Internal server error","type":"server_error","param":null,"code":"upstream_error"}}\n\n' + done,
    );
    expect(outcome.error).toEqual({ status: 502, code: 'upstream_error' });

    const refused = 'data: {"error":{"message":"bad grammar","type":"BadRequestError","param":"structured_outputs","code":400}}\n\n';
    const second = await relay([role, refused, done]);
    expect(second.text).toBe(
      role + 'data: {"error":{"message":"bad grammar","type":"invalid_request_error","param":"structured_outputs","code":"invalid_request"}}\n\n' + done,
    );
    expect(second.outcome.error).toEqual({ status: 400, code: 'invalid_request' });

    // The type a JSON 429 answer has, too.
    const limited = 'data: {"error":{"message":"Too many requests","type":"RateLimitError","param":null,"code":429}}\n\n';
    const third = await relay([role, limited, done]);
    expect(third.text).toBe(role + 'data: {"error":{"message":"Too many requests","type":"rate_limit_exceeded","param":null,"code":"rate_limit_exceeded"}}\n\n' + done);
  });
});

describe('relayStream on whole-event chunks (the byte path)', () => {
  const events = (n: number) => Array.from({ length: n }, (_, i) => chunk(`t${i} `));

  it('relays chunks unchanged when the model needs no change, counting every token chunk', async () => {
    const sameModel = (text: string) => text.replaceAll('team/p/agent:step3', 'wandb-artifact:///team/p/agent');
    const parts = [role, ...events(50), usage, done].map(sameModel);
    const { text, outcome } = await relay(parts, { rewrite: true });
    expect(text).toBe([role, ...events(50), done].map(sameModel).join(''));
    expect(outcome.contentChunks).toBe(50);
    expect(outcome.usage).toEqual({ prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 });
  });

  it('puts the client\'s id into every event of chunks holding one or many events, whatever they carry', async () => {
    const tricky = chunk('he said \"usage\":{ and \"model\":\"x\"');
    const many = events(3).join('');
    const { text, outcome } = await relay([role, chunk('a'), many, tricky, chunk('✓ ü'), usage, done], { rewrite: true, clientWantsUsage: true });
    const expected = [role, chunk('a'), many, tricky, chunk('✓ ü'), usage, done].join('').replaceAll('"model":"team/p/agent:step3"', '"model":"wandb-artifact:///team/p/agent"');
    expect(text).toBe(expected);
    expect(outcome.contentChunks).toBe(6);
  });

  it('falls back to reading the events when a chunk starts otherwise (another id, a split event, CRLF)', async () => {
    const other = chunk('b').replace('"id":"c-1"', '"id":"c-2"');
    const split = chunk('c');
    const crlf = chunk('d').replace(/\n/g, '\r\n');
    const { text, outcome } = await relay([role, chunk('a'), other, split.slice(0, 40), split.slice(40), crlf, done], { rewrite: true });
    const expected = [role, chunk('a'), other, split, chunk('d'), done].join('').replace(/"model":"[^"]*"/g, '"model":"wandb-artifact:///team/p/agent"');
    expect(text).toBe(expected);
    expect(outcome.contentChunks).toBe(4);
  });
});

describe('relayStream and a slow client', () => {
  it('pauses the engine\'s body while the client is not reading, and resumes it, losing nothing', async () => {
    const total = 400;
    const event = (i: number) => chunk(`${i}:${'x'.repeat(1000)}`);
    let sent = 0;
    let paused = false;
    let pauses = 0;
    let mostBuffered = 0;
    let sink: BodySink | undefined;
    const pump = () => {
      // The engine keeps sending while the body flows: one chunk a turn, as socket reads come.
      if (paused || !sink) return;
      if (sent === total) return sink.end();
      sink.data(Buffer.from(sent === 0 ? role : event(sent)));
      sent++;
      setImmediate(pump);
    };
    const source: BodySource = {
      readInto(s) {
        sink = s;
        setImmediate(pump);
        return {
          pause: () => {
            paused = true;
            pauses++;
          },
          resume: () => {
            paused = false;
            setImmediate(pump);
          },
          abort: () => undefined,
        };
      },
    };
    let outcome: RelayOutcome | undefined;
    const relayed = relayStream(source, { clientWantsUsage: false, signal: new Cancel(), onEnd: (o) => (outcome = o) });
    // Nobody reads for a while: the relay must stop the source rather than buffer the whole answer.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(pauses).toBeGreaterThan(0);
    expect(sent).toBeLessThan(total);
    const pieces: Buffer[] = [];
    for await (const piece of relayed) {
      pieces.push(piece as Buffer);
      mostBuffered = Math.max(mostBuffered, relayed.readableLength);
      await new Promise((resolve) => setImmediate(resolve));
    }
    const expected = [role, ...Array.from({ length: total - 1 }, (_, i) => event(i + 1)), done].join('');
    expect(Buffer.concat(pieces).toString()).toBe(expected);
    expect(mostBuffered).toBeLessThan(256 * 1024);
    expect(outcome).toMatchObject({ disconnected: false, error: undefined, contentChunks: total - 1 });
  });
});

describe('completion text helpers', () => {
  it('read the top-level usage, not one inside a string', () => {
    const body = JSON.stringify({ id: 'x', model: 'm', choices: [{ message: { content: '"usage":{"prompt_tokens":1}' } }], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, prompt_tokens_details: { cached_tokens: 4 } } });
    expect(readUsage(body)).toEqual({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, prompt_tokens_details: { cached_tokens: 4 } });
    expect(readUsage('{"usage": null}')).toBeUndefined();
    expect(readUsage('{"choices":[]}')).toBeUndefined();
  });

  it('rewrite the first top-level model field only, compact or spaced, whatever its value', () => {
    const rewrite = modelRewriter('a/b');
    expect(rewrite('{"model":"a/b:step1","x":{"model":"a/b:step1"}}')).toBe('{"model":"a/b","x":{"model":"a/b:step1"}}');
    expect(rewrite('{"model": "a/b:step1"}')).toBe('{"model": "a/b"}');
    // An engine alias, null, or an escaped string: the client's id still replaces it.
    expect(rewrite('{"id":"x","model":"other","choices":[]}')).toBe('{"id":"x","model":"a/b","choices":[]}');
    expect(rewrite('{"model" : null}')).toBe('{"model" : "a/b"}');
    expect(rewrite('{"model":"q\\"uo\\\\te","n":1}')).toBe('{"model":"a/b","n":1}');
    // A nested model before the top-level one, or a "model" string value, is not the field.
    expect(rewrite('{"meta":{"model":"inner"},"note":"model","model":"outer"}')).toBe('{"meta":{"model":"inner"},"note":"model","model":"a/b"}');
    expect(rewrite('data: {"object":"chat.completion.chunk","model":"x"}\n\n')).toBe('data: {"object":"chat.completion.chunk","model":"a/b"}\n\n');
    expect(rewrite('{"choices":[]}')).toBe('{"choices":[]}');
  });
});

describe('relayStream before its first read', () => {
  it('reports a disconnect when destroyed unread', async () => {
    let outcome: RelayOutcome | undefined;
    const stream = relayStream(from([role, done]), { clientWantsUsage: false, signal: new Cancel(), onEnd: (o) => (outcome = o) });
    stream.destroy();
    await new Promise((resolve) => stream.once('close', resolve));
    expect(outcome).toMatchObject({ disconnected: true, contentChunks: 0 });
  });
});

describe('relayStream piped into a response', () => {
  const whole = role + chunk('Hi') + chunk('!') + usage + done;

  it('sends the last bytes and the end of the response in one socket write', async () => {
    const http = await import('node:http');
    let socketWrites = 0;
    const server = http.createServer((_request, response) => {
      const socket = response.socket! as unknown as { _write: (...args: unknown[]) => void; _writev: (...args: unknown[]) => void };
      for (const method of ['_write', '_writev'] as const) {
        const original = socket[method].bind(socket);
        socket[method] = (...args: unknown[]) => {
          socketWrites++;
          original(...args);
        };
      }
      response.setHeader('content-type', 'text/event-stream');
      relayStream(from([whole]), { clientWantsUsage: false, signal: new Cancel(), onEnd: () => undefined }).pipe(response);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as import('node:net').AddressInfo;
      const body = await (await fetch(`http://127.0.0.1:${port}/`)).text();
      expect(body).toBe(role + chunk('Hi') + chunk('!') + done);
      // Headers, the events and the chunked terminator: one write (it was two, the terminator on its own).
      expect(socketWrites).toBe(1);
    } finally {
      server.close();
    }
  });

  it('delivers everything to a destination that is slow to drain when the stream ends', async () => {
    const { Writable } = await import('node:stream');
    const received: Buffer[] = [];
    const destination = new Writable({
      highWaterMark: 16,
      write(piece: Buffer, _encoding, callback) {
        received.push(piece);
        setTimeout(callback, 5);
      },
    });
    const big = chunk('x'.repeat(64 * 1024));
    const finished = new Promise((resolve) => destination.on('finish', resolve));
    relayStream(from([role, big + done]), { clientWantsUsage: false, signal: new Cancel(), onEnd: () => undefined }).pipe(destination);
    await finished;
    expect(Buffer.concat(received).toString()).toBe(role + big + done);
  });
});
