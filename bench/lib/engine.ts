import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fast fake OpenAI-compatible engine for benchmarks: answers at once, vLLM-shaped. Streams send
 * `CHUNKS` content chunks (default 100), the usage chunk when asked, and [DONE]. Prints
 * `{"port":N}` on stdout when listening.
 */
const CHUNKS = Number(process.env.CHUNKS ?? 100);
const MODEL = 'bench/model';

const server = createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (chunk: Buffer) => parts.push(chunk));
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      return send(res, { object: 'list', data: [{ id: MODEL, object: 'model', created: 0, owned_by: 'bench', root: MODEL, parent: null }] });
    }
    const body = JSON.parse(Buffer.concat(parts).toString('utf8') || '{}') as { model?: string; stream?: boolean; stream_options?: { include_usage?: boolean } };
    const id = `chatcmpl-${req.headers['x-request-id'] ?? 'bench'}`;
    const created = Math.floor(Date.now() / 1000);
    const model = body.model ?? MODEL;
    const usage = { prompt_tokens: 12, completion_tokens: CHUNKS, total_tokens: 12 + CHUNKS };
    if (!body.stream) {
      return send(res, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'tok '.repeat(CHUNKS), tool_calls: [], reasoning: null }, logprobs: null, finish_reason: 'stop', stop_reason: null }],
        usage,
      });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const head = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":`;
    res.write(`data: ${head}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`);
    for (let i = 0; i < CHUNKS; i++) {
      res.write(`data: ${head}[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}]}\n\n`);
    }
    res.write(`data: ${head}[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n`);
    if (body.stream_options?.include_usage) res.write(`data: ${head}[],"usage":${JSON.stringify(usage)}}\n\n`);
    res.end('data: [DONE]\n\n');
  });
});

function send(res: import('node:http').ServerResponse, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }));
});
