/**
 * Calls ingest and reads of two checkouts in one process, requests alternated, so that the machine's
 * drift between runs does not pass for a difference. Not a test: run by hand, prints p50s and ratios.
 *
 *   git worktree add /tmp/before <rev> && ln -s "$PWD/node_modules" /tmp/before/node_modules
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npx tsx bench/tracing-ab.ts /tmp/before [--runs 60]
 *
 * Each checkout serves on its own scratch database (bench/lib/server.ts; PGlite without DATABASE_URL).
 * Measures, per request: a /call/upsert_batch of 500 calls (about 1 KB of inputs each); the same with a
 * 63-bit integer in each call's inputs, with whole floats (`1.0`, `0.0`) in each call's inputs and summary,
 * with JSON text holding `1.0` in a string, and with 200 floats (log-probabilities) each; an OTLP/JSON
 * export of 500 GenAI spans (weave's /otel/v1/trace form), with a fractional temperature and with a
 * whole one (`doubleValue: 1`, kept as the float `1.0`); and /calls/stream_query of 2,000 calls of the
 * first three kinds and of 2,000 spans of each OTLP kind.
 */
import { request } from 'undici';
import type { BenchServer } from './lib/server.js';

const before = process.argv[2];
if (!before || before.startsWith('--')) throw new Error('usage: tracing-ab.ts <the other checkout> [--runs N]');
const runsAt = process.argv.indexOf('--runs');
const RUNS = runsAt > 0 ? Number(process.argv[runsAt + 1]) : 60;
const BATCH = 500;
const SEED = '9223372036854775807';

const trees: Record<string, string> = { before, after: new URL('..', import.meta.url).pathname };
const servers: Record<string, BenchServer> = {};
for (const [name, dir] of Object.entries(trees)) {
  const { startBenchServer } = (await import(`${dir}/bench/lib/server.ts`)) as typeof import('./lib/server.js');
  servers[name] = await startBenchServer(`ab_${name}`);
}

async function post(name: string, url: string, body: string): Promise<void> {
  const server = servers[name];
  const headers = { authorization: `Basic ${Buffer.from(`api:${server.key}`).toString('base64')}`, 'content-type': 'application/json' };
  const response = await request(`${server.url}/traces${url}`, { method: 'POST', headers, body });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`${name} ${url}: ${response.statusCode} ${text.slice(0, 300)}`);
}

const padding = 'lorem ipsum dolor sit amet '.repeat(36).slice(0, 950);
type Kind = 'plain' | 'seed' | 'floats' | 'jsonText' | 'logprobs';

/** 200 log-probabilities as a sampler reports them: doubles of 16 or 17 digits, a few of them tiny. */
const logprobs = Array.from({ length: 200 }, (_, i) => -Math.exp(-i / 8) * Math.PI);

/** A batch of `BATCH` calls into `project`, numbered from `from`, with what `kind` adds to each call. */
function batch(project: string, from: number, kind: Kind): string {
  const items: unknown[] = [];
  for (let i = from; i < from + BATCH; i++) {
    const started = new Date(Date.UTC(2025, 0, 1) + i * 10).toISOString();
    const ended = new Date(Date.UTC(2025, 0, 1) + i * 10 + 7).toISOString();
    const extra = { plain: {}, seed: { seed: 'SEED' }, floats: { temperature: 'ONE', scores: ['ZERO', 0.5, 'ONE'] }, jsonText: { args: '{"temperature": 1.0}' }, logprobs: { logprobs } }[kind];
    const inputs = { ...extra, i, text: padding };
    const summary = kind === 'floats' ? { reward: 'ONE' } : {};
    items.push({ mode: 'start', req: { start: { project_id: project, id: `c${i}`, trace_id: `t${i}`, op_name: `weave:///${project}/op/predict:abc`, started_at: started, attributes: { weave: { source: 'bench' } }, inputs } } });
    items.push({ mode: 'end', req: { end: { project_id: project, id: `c${i}`, ended_at: ended, output: { ok: true }, summary } } });
  }
  return JSON.stringify({ batch: items }).replaceAll('"SEED"', SEED).replaceAll('"ONE"', '1.0').replaceAll('"ZERO"', '0.0');
}

/** An OTLP/JSON export of `BATCH` GenAI spans into `project`, numbered from `from`, in weave's {project_id, traces} form. */
function spans(project: string, from: number, temperature: number): string {
  const attribute = (key: string, value: Record<string, unknown>) => ({ key, value });
  const list: unknown[] = [];
  for (let i = from; i < from + BATCH; i++) {
    const start = BigInt(Date.UTC(2025, 0, 1) + i * 10) * 1_000_000n;
    list.push({
      traceId: (i + 1).toString(16).padStart(32, '0'),
      spanId: (i + 1).toString(16).padStart(16, '0'),
      name: 'chat gpt-4o',
      kind: 3,
      startTimeUnixNano: start.toString(),
      endTimeUnixNano: (start + 7_000_000n).toString(),
      attributes: [
        attribute('gen_ai.system', { stringValue: 'openai' }),
        attribute('gen_ai.request.model', { stringValue: 'gpt-4o' }),
        attribute('gen_ai.request.temperature', { doubleValue: temperature }),
        attribute('gen_ai.request.max_tokens', { intValue: '256' }),
        attribute('gen_ai.prompt', { stringValue: JSON.stringify([{ role: 'user', content: padding }]) }),
        attribute('gen_ai.completion', { stringValue: JSON.stringify([{ role: 'assistant', content: 'Paris.' }]) }),
        attribute('gen_ai.usage.input_tokens', { intValue: '230' }),
        attribute('gen_ai.usage.output_tokens', { intValue: '3' }),
      ],
    });
  }
  const traces = { resourceSpans: [{ resource: { attributes: [attribute('service.name', { stringValue: 'bench' })] }, scopeSpans: [{ scope: { name: 'bench' }, spans: list }] }] };
  return JSON.stringify({ project_id: project, traces });
}

/** p50 of `RUNS` timed requests per checkout, alternating which goes first; two warm-up rounds. */
async function measure(label: string, body: (name: string, run: number) => [url: string, body: string]): Promise<void> {
  const times: Record<string, number[]> = { before: [], after: [] };
  for (let run = -2; run < RUNS; run++) {
    for (const name of run % 2 ? ['before', 'after'] : ['after', 'before']) {
      const [url, text] = body(name, run + 2);
      const start = performance.now();
      await post(name, url, text);
      if (run >= 0) times[name].push(performance.now() - start);
    }
  }
  const p50 = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)];
  const [b, a] = [p50(times.before), p50(times.after)];
  console.log(`${label.padEnd(40)} before ${b.toFixed(1).padStart(7)} ms  after ${a.toFixed(1).padStart(7)} ms  after/before ${(a / b).toFixed(2)}`);
}

console.log(`database: ${servers.after.onServer ? 'PostgreSQL server' : 'PGlite (embedded)'}; node ${process.version}; ${RUNS} runs each`);
await measure('upsert_batch, 500 calls', (_name, run) => ['/call/upsert_batch', batch('bench/plain', run * BATCH, 'plain')]);
await measure('upsert_batch, 500 calls, a 63-bit int each', (_name, run) => ['/call/upsert_batch', batch('bench/seeded', run * BATCH, 'seed')]);
await measure('upsert_batch, 500 calls, whole floats each', (_name, run) => ['/call/upsert_batch', batch('bench/floats', run * BATCH, 'floats')]);
await measure('upsert_batch, 500 calls, "1.0" in a string', (_name, run) => ['/call/upsert_batch', batch('bench/json-text', run * BATCH, 'jsonText')]);
await measure('upsert_batch, 500 calls, 200 floats each', (_name, run) => ['/call/upsert_batch', batch('bench/logprobs', run * BATCH, 'logprobs')]);
await measure('OTLP/JSON, 500 spans', (_name, run) => ['/otel/v1/trace', spans('bench/otel', run * BATCH, 0.2)]);
await measure('OTLP/JSON, 500 spans, a whole temperature', (_name, run) => ['/otel/v1/trace', spans('bench/otel-whole', run * BATCH, 1)]);
await measure('stream_query, 2,000 calls', () => ['/calls/stream_query', JSON.stringify({ project_id: 'bench/plain', limit: 2000 })]);
await measure('stream_query, 2,000 calls, a 63-bit int each', () => ['/calls/stream_query', JSON.stringify({ project_id: 'bench/seeded', limit: 2000 })]);
await measure('stream_query, 2,000 calls, whole floats each', () => ['/calls/stream_query', JSON.stringify({ project_id: 'bench/floats', limit: 2000 })]);
await measure('stream_query, 2,000 spans', () => ['/calls/stream_query', JSON.stringify({ project_id: 'bench/otel', limit: 2000 })]);
await measure('stream_query, 2,000 spans, a whole temperature', () => ['/calls/stream_query', JSON.stringify({ project_id: 'bench/otel-whole', limit: 2000 })]);
for (const server of Object.values(servers)) await server.close();
