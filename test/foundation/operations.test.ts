import fs from 'node:fs';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { generateOpenApi, OPENAPI_PATH, validateOpenApi } from '../../src/openapi.js';
import { createTestApp, createUserWithKey, testConfig } from '../helpers/app.js';
import { freshDatabase } from '../helpers/database.js';
import { listen } from '../helpers/listen.js';

let app: App;
beforeAll(async () => {
  app = await createTestApp();
});
afterAll(async () => {
  await app.close();
});

describe('health', () => {
  it('GET /v1/health answers ok without a key', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/health' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ status: 'ok' });
  });

  it('GET /v1/system-check reports each component with success and duration', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/system-check' });
    const body = response.json();
    expect(Object.keys(body).sort()).toEqual(['api', 'cpu_queue', 'database', 'gpu_queue']);
    for (const name of ['api', 'database']) {
      expect(body[name]).toEqual({ success: true, duration_ms: expect.any(Number) });
    }
    expect(response.statusCode).toBe(Object.values(body).every((c) => (c as { success: boolean }).success) ? 200 : 503);
  });

  it('GET /v1/system-check answers 503 naming the database when it is down', async () => {
    const broken = await createTestApp();
    await broken.database.close(); // the database goes away under a running app
    const response = await broken.inject({ method: 'GET', url: '/v1/system-check' });
    expect(response.statusCode).toBe(503);
    const body = response.json();
    expect(body.api).toEqual({ success: true, duration_ms: expect.any(Number) });
    expect(body.database).toEqual({ success: false, duration_ms: expect.any(Number), error: expect.any(String) });
    await broken.close();
  });
});

describe('request ids', () => {
  it('echo the x-request-id sent, percent-encoded where it is not printable ASCII, and generate one when absent', async () => {
    const given = await app.inject({ method: 'GET', url: '/v1/health', headers: { 'x-request-id': 'rollout-42.step:7/{a}"b"' } });
    expect(given.headers['x-request-id']).toBe('rollout-42.step:7/{a}"b"');
    const generated = await app.inject({ method: 'GET', url: '/v1/health' });
    expect(generated.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    const encoded = await app.inject({ method: 'GET', url: '/v1/health', headers: { 'x-request-id': 'a b\u0000c' } });
    expect(encoded.headers['x-request-id']).toBe('a%20b%00c');
  });

  it('are the same on an answer given before the gateway runs as on one it gives (as vLLM keys requests by the header)', async () => {
    const refused = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { 'x-request-id': 'rollout 42 ✓', 'content-type': 'application/json' },
      payload: { model: 'm', messages: [] },
    });
    expect(refused.statusCode).toBe(401);
    expect(refused.headers['x-request-id']).toBe('rollout%2042%20%E2%9C%93');
  });
});

describe('logs', () => {
  /** An app logging at info into `lines` (JSON-parsed), for one test, with `env` set; closed by the test. */
  async function appWithLogs(env: Record<string, string> = {}): Promise<{ logged: App; lines: Record<string, unknown>[] }> {
    const lines: Record<string, unknown>[] = [];
    const logged = await buildApp(testConfig({ LOG_LEVEL: 'info', ...env }), {
      database: await freshDatabase(),
      logStream: { write: (line: string) => void lines.push(JSON.parse(line)) },
    });
    return { logged, lines };
  }

  it('are JSON lines that carry the request id on every line of a request', async () => {
    const { logged, lines } = await appWithLogs();
    try {
      await logged.inject({ method: 'GET', url: '/v1/health', headers: { 'x-request-id': 'trace-me-1' } });
      const mine = lines.filter((line) => line.request_id === 'trace-me-1');
      expect(mine.map((line) => line.msg)).toEqual(['incoming request', 'request completed']);
      for (const line of mine) expect(line).toMatchObject({ level: 30, time: expect.any(Number) });
    } finally {
      await logged.close();
    }
  });

  it('leave out the capability token of a W&B upload URL, which needs no key', async () => {
    const { logged, lines } = await appWithLogs();
    try {
      const token = 'secret-capability-token';
      await logged.inject({ method: 'PUT', url: `/wandb/artifact-files/${token}?part=1`, headers: { 'x-request-id': 'upload-1' }, payload: 'x' });
      const mine = lines.filter((line) => line.request_id === 'upload-1');
      expect(mine[0]).toMatchObject({ msg: 'incoming request', req: { method: 'PUT', url: '/wandb/artifact-files/<token>?part=1' } });
      expect(JSON.stringify(lines)).not.toContain(token);
    } finally {
      await logged.close();
    }
  });

  it('take a body cut off by REQUEST_TIMEOUT_SECONDS for the client gone, not for a database fault', async () => {
    const { logged, lines } = await appWithLogs({ REQUEST_TIMEOUT_SECONDS: '1' });
    let handled: (error: Error) => void;
    const errorHandled = new Promise<Error>((resolve) => (handled = resolve));
    logged.addHook('onError', async (_request, _reply, error) => handled(error));
    try {
      const url = await listen(logged);
      const user = await createUserWithKey(logged);
      const socket = net.connect({ host: '127.0.0.1', port: Number(new URL(url).port) });
      socket.on('error', () => undefined);
      socket.write(
        `POST /v1/preview/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: cut-off\r\nContent-Type: application/json\r\nAuthorization: Bearer ${user.key}\r\nContent-Length: 100000\r\n\r\n{"name": "`,
      );
      // Node answers 408 and closes the connection, which fails the request's body stream ("aborted").
      expect((await errorHandled) as Error & { code?: string }).toMatchObject({ code: 'ECONNRESET', message: 'aborted' });
      await new Promise((resolve) => setImmediate(resolve));
      socket.destroy();
      const mine = lines.filter((line) => line.request_id === 'cut-off');
      expect(mine.map((line) => line.msg)).toContain('incoming request');
      expect(mine.filter((line) => (line.level as number) >= 50)).toEqual([]);
      expect(JSON.stringify(mine)).not.toContain('database');
    } finally {
      await logged.close();
    }
  });
});

describe('metrics', () => {
  it('GET /metrics counts requests by route pattern and status, with a latency histogram', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    await app.inject({ method: 'GET', url: '/v1/admin/keys', headers: admin.headers });
    await app.inject({ method: 'GET', url: '/v1/nowhere/123' });
    const response = await app.inject({ method: 'GET', url: '/metrics' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toContain('text/plain');
    expect(response.body).toContain('trainyard_http_requests_total{method="GET",route="/v1/admin/keys",status="200"} 1');
    expect(response.body).toContain('trainyard_http_requests_total{method="GET",route="unmatched",status="404"} 1');
    expect(response.body).toMatch(/trainyard_http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/v1\/admin\/keys"\} \d/);
  });

  it('sums a route\'s statuses into one cumulative latency histogram whose +Inf bucket is its count', async () => {
    const admin = await createUserWithKey(app, { isAdmin: true });
    const before = await app.inject({ method: 'GET', url: '/metrics' });
    const count = (body: string) => Number(/trainyard_http_request_duration_seconds_count\{method="GET",route="\/v1\/admin\/users"\} (\d+)/.exec(body)?.[1] ?? 0);
    const already = count(before.body);
    await app.inject({ method: 'GET', url: '/v1/admin/users', headers: admin.headers });
    await app.inject({ method: 'GET', url: '/v1/admin/users', headers: admin.headers });
    await app.inject({ method: 'GET', url: '/v1/admin/users' }); // 401, the same route
    const body = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(count(body)).toBe(already + 3);
    expect(body).toContain(`trainyard_http_requests_total{method="GET",route="/v1/admin/users",status="401"} 1`);
    const buckets = [...body.matchAll(/trainyard_http_request_duration_seconds_bucket\{le="([^"]+)",method="GET",route="\/v1\/admin\/users"\} (\d+)/g)];
    expect(buckets.map(([, le]) => le)).toEqual(['0.001', '0.0025', '0.005', '0.01', '0.025', '0.05', '0.1', '0.25', '0.5', '1', '2.5', '5', '10', '30', '60', '+Inf']);
    const values = buckets.map(([, , value]) => Number(value));
    for (let i = 1; i < values.length; i++) expect(values[i]).toBeGreaterThanOrEqual(values[i - 1]!);
    expect(values.at(-1)).toBe(already + 3);
    expect(body).toMatch(/trainyard_http_request_duration_seconds_sum\{method="GET",route="\/v1\/admin\/users"\} [0-9.e-]+\n/);
  });
});

describe('API documents', () => {
  it('the committed openapi/openapi.json matches the routes', async () => {
    expect(fs.readFileSync(OPENAPI_PATH, 'utf8')).toBe(await generateOpenApi());
  });

  it('the committed document is valid OpenAPI 3.1 and every $ref in it resolves', async () => {
    const document = fs.readFileSync(OPENAPI_PATH, 'utf8');
    expect(await validateOpenApi(document)).toEqual([]);
    // The recursive weave query schemas are components, not dangling references.
    expect(Object.keys(JSON.parse(document).components.schemas)).toEqual(
      expect.arrayContaining(['OperationInput', 'OperandInput', 'JsonValueInput']),
    );
  });

  it('every operation documents its 4XX and 503 answers in its API\'s error form', () => {
    const document = JSON.parse(fs.readFileSync(OPENAPI_PATH, 'utf8'));
    const family = (url: string) =>
      url.startsWith('/traces') || url === '/graphql'
        ? 'TracingError'
        : /^\/(v1\/(chat\/completions|completions|models|usage)|tokenize|detokenize)/.test(url) ? 'InferenceError' : 'TrainingError';
    for (const [url, operations] of Object.entries<Record<string, { responses: Record<string, any> }>>(document.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        // /v1/system-check and the gateway's engine routes declare 503 bodies of their own.
        const own503 = url === '/v1/system-check' || /^\/(v1\/(chat\/completions|completions)|tokenize|detokenize)/.test(url);
        for (const status of own503 ? ['4XX'] : ['4XX', '503']) {
          const schema = operation.responses[status]?.content?.['application/json']?.schema;
          expect(schema, `${method} ${url} ${status}`).toEqual(expect.objectContaining({ $ref: `#/components/schemas/${family(url)}` }));
        }
      }
    }
    expect(document.paths['/v1/workers/jobs/{job_id}/inputs'].get.responses['200'].content).toEqual({
      'application/x-ndjson': { schema: { type: 'string' } },
    });
  });

  it('the OpenAPI validation reports a reference to a missing component', async () => {
    const document = JSON.parse(fs.readFileSync(OPENAPI_PATH, 'utf8'));
    document.components.schemas = {};
    expect(await validateOpenApi(JSON.stringify(document))).toEqual([expect.stringMatching(/^Can't resolve #\/components\/schemas\/\w+$/)]);
    document.paths['/v1/health'].get.responses['200'].content['application/json'].schema = {
      $ref: '#/components/schemas/OperationInput#/$defs/y',
    };
    document.components.schemas = JSON.parse(fs.readFileSync(OPENAPI_PATH, 'utf8')).components.schemas;
    expect(await validateOpenApi(JSON.stringify(document))).toEqual(['$ref #/components/schemas/OperationInput#/$defs/y does not resolve']);
  });

  it('/docs serves a browsable UI and the document without a key', async () => {
    const page = await app.inject({ method: 'GET', url: '/docs/' });
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('swagger-ui');
    const json = await app.inject({ method: 'GET', url: '/docs/json' });
    expect(json.statusCode).toBe(200);
    expect(json.json().paths['/v1/health']).toBeDefined();
    const asset = await app.inject({ method: 'GET', url: '/docs/static/swagger-ui-bundle.js' });
    expect(asset.statusCode).toBe(200); // served locally: works offline
  });
});
