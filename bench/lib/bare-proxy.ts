import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

/**
 * The limit for any Node gateway: node:http in, an undici pool out, bodies piped both ways. No auth,
 * no validation, no metering. Prints `{"port":N}` when listening. UPSTREAM is the engine's origin.
 */
const pool = new Pool(process.env.UPSTREAM!, { connections: 256, headersTimeout: 0, bodyTimeout: 0 });

const server = createServer((req, res) => {
  const controller = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  pool
    .request({
      method: req.method as 'POST',
      path: req.url!,
      // With content-length the body goes out as is, not re-framed as chunked.
      headers: {
        'content-type': req.headers['content-type'] ?? 'application/json',
        ...(req.headers['content-length'] ? { 'content-length': req.headers['content-length'] } : {}),
      },
      body: req,
      signal: controller.signal,
    })
    .then(({ statusCode, headers, body }) => {
      const length = headers['content-length'];
      res.writeHead(statusCode, {
        'content-type': String(headers['content-type'] ?? 'application/json'),
        ...(length ? { 'content-length': String(length) } : {}),
      });
      body.pipe(res);
    })
    .catch((error: Error) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: error.message } }));
    });
});

server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }));
});
