/**
 * OpenTelemetry ingest benchmark (issue 6). Not a test: run by hand, prints figures and the ratio.
 *
 *   npm run bench:otel -- [--spans 102400] [--batch 512] [--concurrency 4]
 *
 * Uses DATABASE_URL's server when set (a scratch database is created beside it and dropped), else an
 * embedded PGlite in a temporary directory. On loopback, sequentially, in one run:
 *   1. Baseline: `--spans` calls through POST /traces/call/upsert_batch, `--batch` start+end pairs a
 *      request, each call carrying what the span below maps to (the tracing-core ingest path).
 *   2. OTel: the same number of spans through the real @opentelemetry/exporter-trace-otlp-proto
 *      exporter (protobuf, no compression), `--batch` spans per export, to POST /traces/otel/v1/traces.
 * Both phases keep `--concurrency` requests in flight (several services exporting at once; 1 gives the
 * strictly sequential figure). Spans are made with the OpenTelemetry SDK before the clock starts; the
 * timed loop is the exporter's serialisation, the request, decoding, mapping and the database write.
 */
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { request } from 'undici';
import { startBenchServer } from './lib/server.js';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}
const SPANS = arg('spans', 102_400);
const BATCH = arg('batch', 512);
const CONCURRENCY = arg('concurrency', 4);

/** Runs `work(i)` for i = 0..count-1 with at most CONCURRENCY in flight. */
async function pooled(count: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await work(next++);
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, count) }, worker));
}

const server = await startBenchServer('otel');
const { key } = server;

const base = `${server.url}/traces`;
const authorization = `Basic ${Buffer.from(`api:${key}`).toString('base64')}`;

const prompt = JSON.stringify([{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is the capital of France? '.repeat(4) }]);
const completion = JSON.stringify([{ role: 'assistant', content: 'The capital of France is Paris.' }]);

// 1. /call/upsert_batch with the calls these spans become.
const started = Date.now();
const upsertStart = performance.now();
await pooled(Math.ceil(SPANS / BATCH), async (n) => {
  const sent = n * BATCH;
  const batch: unknown[] = [];
  for (let i = sent; i < Math.min(SPANS, sent + BATCH); i++) {
    const id = `call-${i}`;
    const at = new Date(started + i).toISOString();
    batch.push(
      { mode: 'start', req: { start: { project_id: 'bench/upsert', id, trace_id: `trace-${Math.floor(i / 8)}`, op_name: 'chat gpt-4o', started_at: at, attributes: { system: 'openai', model: 'gpt-4o', operation: 'chat' }, inputs: { 'gen_ai.prompt': JSON.parse(prompt) } } } },
      { mode: 'end', req: { end: { project_id: 'bench/upsert', id, ended_at: at, output: { 'gen_ai.completion': JSON.parse(completion) }, summary: { usage: { 'gpt-4o': { input_tokens: 42, output_tokens: 9 } } } } } },
    );
  }
  const response = await request(`${base}/call/upsert_batch`, { method: 'POST', headers: { authorization, 'content-type': 'application/json' }, body: JSON.stringify({ batch }) });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`upsert_batch: ${response.statusCode} ${text.slice(0, 300)}`);
});
const upsertSeconds = (performance.now() - upsertStart) / 1000;

// 2. OTLP protobuf exports of the same number of spans.
const memory = new InMemorySpanExporter();
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'bench', 'wandb.entity': 'bench', 'wandb.project': 'otel' }),
  spanProcessors: [new SimpleSpanProcessor(memory)],
});
const tracer = provider.getTracer('bench');
for (let i = 0; i < SPANS; i++) {
  const span = tracer.startSpan('chat gpt-4o', {
    attributes: {
      'gen_ai.system': 'openai',
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'gpt-4o',
      'gen_ai.prompt': prompt,
      'gen_ai.completion': completion,
      'gen_ai.usage.input_tokens': 42,
      'gen_ai.usage.output_tokens': 9,
    },
  });
  span.end();
}
const spans: ReadableSpan[] = memory.getFinishedSpans();
const exporter = new OTLPTraceExporter({ url: `${base}/otel/v1/traces`, headers: { authorization }, timeoutMillis: 60_000 });
const exportBatch = (batch: ReadableSpan[]) =>
  new Promise<void>((resolve, reject) =>
    exporter.export(batch, (result) => (result.code === 0 /* ExportResultCode.SUCCESS */ ? resolve() : reject(result.error ?? new Error('export failed')))),
  );
const otelStart = performance.now();
await pooled(Math.ceil(spans.length / BATCH), (n) => exportBatch(spans.slice(n * BATCH, (n + 1) * BATCH)));
const otelSeconds = (performance.now() - otelStart) / 1000;

const stored = await request(`${base}/calls/query_stats`, { method: 'POST', headers: { authorization, 'content-type': 'application/json' }, body: JSON.stringify({ project_id: 'bench/otel' }) });
const count = ((await stored.body.json()) as { count: number }).count;
if (count !== SPANS) throw new Error(`expected ${SPANS} calls from spans, found ${count}`);

const upsertRate = SPANS / upsertSeconds;
const otelRate = SPANS / otelSeconds;
console.log(`database: ${server.onServer ? 'PostgreSQL server' : 'PGlite'}; ${SPANS} spans, ${BATCH} per request, ${CONCURRENCY} in flight`);
console.log(`/call/upsert_batch (${BATCH} start+end pairs a request): ${upsertRate.toFixed(0)} calls/s (${upsertSeconds.toFixed(1)} s)`);
console.log(`/otel/v1/traces (protobuf, ${BATCH} spans an export):     ${otelRate.toFixed(0)} spans/s (${otelSeconds.toFixed(1)} s)`);
console.log(`OTel / upsert_batch: ${((otelRate / upsertRate) * 100).toFixed(0)}%   target: >= 15,000 spans/s`);

await exporter.shutdown();
await provider.shutdown();
await server.close();
