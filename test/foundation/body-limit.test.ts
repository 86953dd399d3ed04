import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';

/**
 * A body over BODY_LIMIT_MB gets a 413 the client can read: the server does not close the connection
 * while the client is still sending (the kernel would answer the unread bytes with a reset, and the
 * client would lose the 413), so a raw HTTP client that writes its whole body reads the answer.
 */

const MIB = 1024 * 1024;
let app: App;
let port: number;
let user: TestUser;

beforeAll(async () => {
  app = await createTestApp({ BODY_LIMIT_MB: '1' });
  port = Number(new URL(await listen(app)).port);
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
});

interface RawExchange {
  /** Everything the server sent, as text. */
  received: string;
  /** Bytes of the body the client managed to write before the server stopped reading. */
  written: number;
  error: string | undefined;
}

/**
 * Sends the request head, `prefix`, `bodyBytes` of filler and `suffix`, in 64 KiB writes as fast as the
 * socket takes them, as clients do: most read the response only after writing the body. Resolves once the answer has arrived,
 * or when the connection closes or breaks (`error`: EPIPE, ECONNRESET).
 */
function rawPost(
  path: string,
  options: {
    bodyBytes: number;
    chunked?: boolean;
    headers?: Record<string, string>;
    contentType?: string;
    prefix?: string;
    suffix?: string;
    port?: number;
    key?: string;
  },
): Promise<RawExchange> {
  const { chunked = false, prefix = '' } = options;
  const bodyBytes = options.bodyBytes + prefix.length;
  const contentLength = bodyBytes + (options.suffix?.length ?? 0);
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port: options.port ?? port });
    const exchange: RawExchange = { received: '', written: 0, error: undefined };
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      socket.destroy();
      resolve(exchange);
    };
    socket.on('data', (chunk) => {
      exchange.received += chunk.toString('latin1');
      // The answer is complete once the JSON body of its Content-Length has arrived.
      const match = /\r\ncontent-length: (\d+)\r\n[\s\S]*?\r\n\r\n([\s\S]*)$/i.exec(exchange.received);
      if (match && Buffer.byteLength(match[2], 'latin1') >= Number(match[1])) setTimeout(finish, 50);
    });
    socket.on('error', (error) => {
      exchange.error = (error as NodeJS.ErrnoException).code ?? error.message;
      finish();
    });
    socket.on('close', finish);
    const head = [
      `POST ${path} HTTP/1.1`,
      'Host: 127.0.0.1',
      `Authorization: Bearer ${options.key ?? user.key}`,
      `Content-Type: ${options.contentType ?? 'application/json'}`,
      chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${contentLength}`,
      ...Object.entries(options.headers ?? {}).map(([name, value]) => `${name}: ${value}`),
      '',
      '',
    ].join('\r\n');
    socket.write(head + prefix);
    exchange.written = prefix.length;
    const piece = Buffer.alloc(64 * 1024, 0x20); // spaces: valid JSON whitespace, whatever the limit
    const write = () => {
      while (!finished && exchange.written < bodyBytes) {
        const size = Math.min(piece.length, bodyBytes - exchange.written);
        const data = size === piece.length ? piece : piece.subarray(0, size);
        exchange.written += size;
        const ok = socket.write(chunked ? Buffer.concat([Buffer.from(`${size.toString(16)}\r\n`), data, Buffer.from('\r\n')]) : data);
        if (!ok) {
          socket.once('drain', write);
          return;
        }
      }
      if (!finished && options.suffix) socket.write(options.suffix);
      if (chunked && !finished) socket.write('0\r\n\r\n');
    };
    write();
  });
}

function statusAndBody(exchange: RawExchange): [number, unknown] {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(exchange.received)?.[1] ?? 0);
  const body = exchange.received.slice(exchange.received.indexOf('\r\n\r\n') + 4);
  let parsed: unknown = body;
  try {
    parsed = JSON.parse(body);
  } catch {
    // left as text
  }
  return [status, parsed];
}

const TOO_LARGE = `Request body is larger than the limit of ${MIB} bytes.`;

describe('a body over BODY_LIMIT_MB', () => {
  const apis: [string, string, unknown][] = [
    ['training', '/v1/preview/models', { detail: TOO_LARGE }],
    ['inference', '/v1/chat/completions', { error: { message: TOO_LARGE, type: 'invalid_request_error', param: null, code: 'payload_too_large' } }],
    ['tracing', '/traces/call/start', { reason: TOO_LARGE }],
  ];
  for (const [api, path, body] of apis) {
    it(`gets a 413 in the ${api} API's error form that a client still sending can read`, async () => {
      const exchange = await rawPost(path, { bodyBytes: 16 * MIB });
      expect(exchange.error).toBeUndefined();
      expect(statusAndBody(exchange)).toEqual([413, body]);
    });
  }

  it('gets its 413 when the body is chunked, without a Content-Length', async () => {
    const exchange = await rawPost('/v1/preview/models', { bodyBytes: 16 * MIB, chunked: true });
    expect(exchange.error).toBeUndefined();
    expect(statusAndBody(exchange)).toEqual([413, { detail: TOO_LARGE }]);
  });

  it('gets its 413 when the client asked to close the connection after the request', async () => {
    const exchange = await rawPost('/v1/preview/models', { bodyBytes: 16 * MIB, headers: { Connection: 'close' } });
    expect(exchange.error).toBeUndefined();
    expect(statusAndBody(exchange)).toEqual([413, { detail: TOO_LARGE }]);
  });
});

describe('a file over TRACE_FILE_LIMIT_MB', () => {
  // The multipart reader skips the rest of the file before the answer anyway; this keeps it so.
  it('gets a 413 that a client still sending its upload can read', async () => {
    const files = await createTestApp({ BODY_LIMIT_MB: '64', TRACE_FILE_LIMIT_MB: '1' });
    try {
      const filesPort = Number(new URL(await listen(files)).port);
      const owner = await createUserWithKey(files);
      const boundary = 'trainyard-upload';
      const prefix =
        `--${boundary}\r\nContent-Disposition: form-data; name="project_id"\r\n\r\n${owner.entity}/files\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`;
      const exchange = await rawPost('/traces/file/create', {
        port: filesPort,
        key: owner.key,
        bodyBytes: 16 * MIB,
        contentType: `multipart/form-data; boundary=${boundary}`,
        prefix,
        suffix: `\r\n--${boundary}--\r\n`,
      });
      expect(exchange.error).toBeUndefined();
      expect(statusAndBody(exchange)).toEqual([413, { reason: `The file is larger than the limit of ${MIB} bytes (TRACE_FILE_LIMIT_MB).` }]);
    } finally {
      await files.close();
    }
  });
});
