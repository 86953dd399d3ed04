import { Pool } from 'undici';

/**
 * A closed-loop load generator: CONCURRENCY workers each send the next request as soon as the last
 * answer has been read in full, for WARMUP_MS (not measured) and then DURATION_MS. Prints one JSON
 * line: requests (measured), answered (warm-up included), errors, req/s, latency percentiles in ms.
 */
const url = new URL(process.env.TARGET!);
const concurrency = Number(process.env.CONCURRENCY ?? 1);
const warmupMs = Number(process.env.WARMUP_MS ?? 1000);
const durationMs = Number(process.env.DURATION_MS ?? 5000);
const stream = process.env.STREAM === '1';
const headers: Record<string, string> = { 'content-type': 'application/json' };
if (process.env.KEY) headers.authorization = `Bearer ${process.env.KEY}`;
const body = JSON.stringify({
  model: 'bench/model',
  messages: [{ role: 'user', content: 'Say something short.' }],
  max_tokens: 100,
  temperature: 0.7,
  ...(stream ? { stream: true } : {}),
});

const pool = new Pool(url.origin, { connections: concurrency, pipelining: 1, headersTimeout: 30_000, bodyTimeout: 30_000 });
const latencies: number[] = [];
let errors = 0;
/** Every answer, warm-up included: the server's CPU time over the whole run is divided by it. */
let answered = 0;
let measuring = false;
let stopping = false;

async function worker(): Promise<void> {
  while (!stopping) {
    const started = process.hrtime.bigint();
    try {
      const response = await pool.request({ method: 'POST', path: '/v1/chat/completions', headers, body });
      const text = await response.body.text();
      if (response.statusCode !== 200 || (stream && !text.endsWith('data: [DONE]\n\n'))) throw new Error(`status ${response.statusCode}`);
      answered++;
      if (measuring) latencies.push(Number(process.hrtime.bigint() - started) / 1e6);
    } catch {
      if (measuring) errors++;
    }
  }
}

const workers = Array.from({ length: concurrency }, () => worker());
await new Promise((resolve) => setTimeout(resolve, warmupMs));
measuring = true;
const start = performance.now();
await new Promise((resolve) => setTimeout(resolve, durationMs));
measuring = false;
const elapsed = (performance.now() - start) / 1000;
stopping = true;
await Promise.all(workers);
await pool.close();

latencies.sort((a, b) => a - b);
const pct = (p: number) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] : NaN);
console.log(JSON.stringify({ requests: latencies.length, answered, errors, rps: latencies.length / elapsed, p50: pct(50), p99: pct(99) }));
