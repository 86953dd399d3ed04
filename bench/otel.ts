/**
 * OpenTelemetry ingest benchmark (issue 6). Not a test: run by hand, prints figures and the ratio.
 *
 *   npm run bench:otel -- [--spans 102400] [--batch 512] [--concurrency 4] [--client process|inline]
 *
 * Uses DATABASE_URL's server when set (a scratch database is created beside it and dropped), else an
 * embedded PGlite in a temporary directory. On loopback, sequentially, in one run:
 *   1. Baseline: `--spans` calls through POST /traces/call/upsert_batch, `--batch` start+end pairs a
 *      request, each call carrying what the span below maps to (the tracing-core ingest path).
 *   2. OTel: the same number of spans through the real @opentelemetry/exporter-trace-otlp-proto
 *      exporter (protobuf, no compression), `--batch` spans per export, to POST /traces/otel/v1/traces.
 * Both phases keep `--concurrency` requests in flight (several services exporting at once; 1 gives the
 * strictly sequential figure). Spans are made with the OpenTelemetry SDK before the clock starts; the
 * timed loop is the client's serialisation, the request, decoding, mapping and the database write.
 *
 * `--client process` (the default) runs both clients in a child process, so that the server's
 * figures are not charged with the clients' work in its own event loop (the machine's cores are still
 * shared with it, and with PostgreSQL); `--client inline` runs them in the server's process (how
 * this benchmark measured before).
 */
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { numberArg } from './lib/args.js';
import { startBenchServer } from './lib/server.js';

const SPANS = numberArg('spans', 102_400);
const BATCH = numberArg('batch', 512);
const CONCURRENCY = numberArg('concurrency', 4);
const clientArg = process.argv.indexOf('--client');
const CLIENT = process.argv.includes('--child') ? 'child' : clientArg >= 0 ? process.argv[clientArg + 1] : 'process';
if (CLIENT !== 'child' && CLIENT !== 'process' && CLIENT !== 'inline') throw new Error('--client is process or inline');

/** Runs `work(i)` for i = 0..count-1 with at most CONCURRENCY in flight. */
async function pooled(count: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await work(next++);
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, count) }, worker));
}

const prompt = JSON.stringify([{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is the capital of France? '.repeat(4) }]);
const completion = JSON.stringify([{ role: 'assistant', content: 'The capital of France is Paris.' }]);

/** The two clients; each phase returns its seconds. */
function clients(base: string, key: string) {
  const authorization = `Basic ${Buffer.from(`api:${key}`).toString('base64')}`;

  // 1. /call/upsert_batch with the calls these spans become.
  async function upsert(): Promise<number> {
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
    return (performance.now() - upsertStart) / 1000;
  }

  // 2. OTLP protobuf exports of the same number of spans, made before the clock starts.
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'bench', 'wandb.entity': 'bench', 'wandb.project': 'otel' }),
    spanProcessors: [new SimpleSpanProcessor(memory)],
  });
  const exporter = new OTLPTraceExporter({ url: `${base}/otel/v1/traces`, headers: { authorization }, timeoutMillis: 60_000 });
  function makeSpans(): ReadableSpan[] {
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
    return memory.getFinishedSpans();
  }
  const exportBatch = (batch: ReadableSpan[]) =>
    new Promise<void>((resolve, reject) =>
      exporter.export(batch, (result) => (result.code === 0 /* ExportResultCode.SUCCESS */ ? resolve() : reject(result.error ?? new Error('export failed')))),
    );
  async function otel(spans: ReadableSpan[]): Promise<number> {
    const otelStart = performance.now();
    await pooled(Math.ceil(spans.length / BATCH), (n) => exportBatch(spans.slice(n * BATCH, (n + 1) * BATCH)));
    return (performance.now() - otelStart) / 1000;
  }
  const close = async () => {
    await exporter.shutdown();
    await provider.shutdown();
  };
  return { upsert, makeSpans, otel, close };
}

type Phase = 'upsert' | 'otel' | 'close';

if (CLIENT === 'child') {
  // The client process: spans are made first, then each phase runs when the parent asks for it.
  const client = clients(process.env.BENCH_BASE!, process.env.BENCH_KEY!);
  const spans = client.makeSpans();
  process.on('message', (phase: Phase) => {
    const work = phase === 'upsert' ? client.upsert() : phase === 'otel' ? client.otel(spans) : client.close().then(() => 0);
    work.then(
      (seconds) => {
        process.send!({ phase, seconds });
        if (phase === 'close') process.disconnect();
      },
      (error: Error) => {
        process.send!({ phase, error: error.stack ?? String(error) });
        process.disconnect();
      },
    );
  });
  process.send!({ phase: 'ready' });
} else {
  const server = await startBenchServer('otel');
  const base = `${server.url}/traces`;
  let run: (phase: Phase) => Promise<number>;
  let child: ChildProcess | undefined;
  if (CLIENT === 'inline') {
    const client = clients(base, server.key);
    const spans = client.makeSpans();
    run = (phase) => (phase === 'upsert' ? client.upsert() : phase === 'otel' ? client.otel(spans) : client.close().then(() => 0));
  } else {
    const forked = fork(fileURLToPath(import.meta.url), [...process.argv.slice(2), '--child'], { env: { ...process.env, BENCH_BASE: base, BENCH_KEY: server.key } });
    child = forked;
    const replies: ((reply: { phase: string; seconds?: number; error?: string }) => void)[] = [];
    forked.on('message', (reply: { phase: string; seconds?: number; error?: string }) => replies.shift()?.(reply));
    const next = () => new Promise<{ phase: string; seconds?: number; error?: string }>((resolve) => replies.push(resolve));
    await next(); // ready: the child has made its spans
    run = async (phase) => {
      const reply = next();
      forked.send(phase);
      const { seconds, error } = await reply;
      if (error) throw new Error(`client process: ${error}`);
      return seconds ?? 0;
    };
  }

  const upsertSeconds = await run('upsert');
  const otelSeconds = await run('otel');
  await run('close');

  const authorization = `Basic ${Buffer.from(`api:${server.key}`).toString('base64')}`;
  const stored = await request(`${base}/calls/query_stats`, { method: 'POST', headers: { authorization, 'content-type': 'application/json' }, body: JSON.stringify({ project_id: 'bench/otel' }) });
  const count = ((await stored.body.json()) as { count: number }).count;
  if (count !== SPANS) throw new Error(`expected ${SPANS} calls from spans, found ${count}`);

  const upsertRate = SPANS / upsertSeconds;
  const otelRate = SPANS / otelSeconds;
  console.log(`database: ${server.onServer ? 'PostgreSQL server' : 'PGlite'}; ${SPANS} spans, ${BATCH} per request, ${CONCURRENCY} in flight; clients ${CLIENT === 'inline' ? "in the server's process" : 'in a child process'}`);
  console.log(`/call/upsert_batch (${BATCH} start+end pairs a request): ${upsertRate.toFixed(0)} calls/s (${upsertSeconds.toFixed(1)} s)`);
  console.log(`/otel/v1/traces (protobuf, ${BATCH} spans an export):     ${otelRate.toFixed(0)} spans/s (${otelSeconds.toFixed(1)} s)`);
  console.log(`OTel / upsert_batch: ${((otelRate / upsertRate) * 100).toFixed(0)}%   target: >= 15,000 spans/s`);

  if (child?.connected) child.disconnect();
  await server.close();
}
