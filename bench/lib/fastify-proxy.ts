import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { Pool } from 'undici';

/**
 * A second baseline: the least a Fastify gateway does. One route, the body parsed with JSON.parse and
 * serialised again for the engine, the answer read whole and sent in one write. No auth, validation
 * or metering. Shows what trainyard's own layers cost on top of the framework it runs on. Prints
 * `{"port":N}` when listening. UPSTREAM is the engine's origin.
 */
const pool = new Pool(process.env.UPSTREAM!, { connections: 256, headersTimeout: 0, bodyTimeout: 0 });
const app = Fastify({ logger: false });
app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
  try {
    done(null, JSON.parse(body as string));
  } catch (error) {
    done(error as Error, undefined);
  }
});
app.post('/v1/chat/completions', async (request, reply) => {
  const { statusCode, headers, body } = await pool.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(request.body),
  });
  reply.code(statusCode).type(String(headers['content-type'] ?? 'application/json'));
  // A stream is piped as it comes; a JSON answer is read whole and written at once.
  if (String(headers['content-type']).startsWith('text/event-stream')) return reply.send(body);
  return reply.send(Buffer.from(await body.arrayBuffer()));
});
await app.listen({ host: '127.0.0.1', port: 0 });
console.log(JSON.stringify({ port: (app.server.address() as AddressInfo).port }));
