/**
 * Tracing benchmark (issue 3). Not a test: run by hand, prints figures and ratios.
 *
 *   npm run bench:tracing -- [--calls 100000] [--big 1000000] [--runs 50]
 *
 * Uses DATABASE_URL's server when set (a scratch database is created beside it and dropped), else an
 * embedded PGlite in a temporary directory.
 *   1. Ingest: `--calls` calls through POST /traces/call/upsert_batch on loopback, batches of 500 start+end
 *      pairs with about 1 KB of inputs each, against a baseline in the same run: the same rows written
 *      by one multi-row INSERT per batch straight into the database. Then the same calls with a 63-bit
 *      integer in each one's inputs, against the plain calls' rate.
 *   2. Queries: `--big` calls seeded in one project with INSERT ... SELECT generate_series, then p50/p99
 *      over `--runs` requests of each query through HTTP; and 2,000 of the ingested calls streamed back.
 */
import os from 'node:os';
import { sql } from 'kysely';
import { numberArg } from './lib/args.js';
import { startBenchServer, tracingPoster } from './lib/server.js';

const CALLS = numberArg('calls', 100_000);
const BIG = numberArg('big', 1_000_000);
const RUNS = numberArg('runs', 50);
const BATCH = 500;

const server = await startBenchServer('tracing');
const { app } = server;

const postJson = tracingPoster(server);

const padding = 'lorem ipsum dolor sit amet '.repeat(36).slice(0, 950);
function batchItems(project: string, from: number, count: number): unknown[] {
  const items: unknown[] = [];
  for (let i = from; i < from + count; i++) {
    const started = new Date(Date.UTC(2025, 0, 1) + i * 10).toISOString();
    const ended = new Date(Date.UTC(2025, 0, 1) + i * 10 + 7).toISOString();
    items.push({ mode: 'start', req: { start: { project_id: project, id: `call-${i}`, trace_id: `trace-${i}`, op_name: `weave:///bench/${project.split('/')[1]}/op/predict:abc`, started_at: started, attributes: { weave: { source: 'bench' } }, inputs: { i, text: padding } } } });
    items.push({ mode: 'end', req: { end: { project_id: project, id: `call-${i}`, ended_at: ended, output: { ok: true }, summary: {} } } });
  }
  return items;
}

function baselineRows(project: string, from: number, count: number) {
  const rows = [];
  for (let i = from; i < from + count; i++) {
    rows.push({
      project_id: project,
      id: `call-${i}`,
      trace_id: `trace-${i}`,
      op_name: `weave:///bench/${project.split('/')[1]}/op/predict:abc`,
      started_at: new Date(Date.UTC(2025, 0, 1) + i * 10).toISOString(),
      ended_at: new Date(Date.UTC(2025, 0, 1) + i * 10 + 7).toISOString(),
      attributes: sql`${JSON.stringify({ weave: { source: 'bench' } })}::jsonb`,
      inputs: sql`${JSON.stringify({ i, text: padding })}::jsonb`,
      output: sql`${JSON.stringify({ ok: true })}::jsonb`,
      summary: sql`'{}'::jsonb`,
      input_refs: [],
      output_refs: [],
    });
  }
  return rows as never[];
}

function rate(n: number, ms: number): number {
  return Math.round((n / ms) * 1000);
}

console.log(`database: ${server.onServer ? 'PostgreSQL server' : 'PGlite (embedded)'}; node ${process.version}; ${os.cpus().length} cores`);

// 1. Ingest
// Both sides build their payloads before the clock starts: the client's JSON is not the server's cost.
const bodies: string[] = [];
for (let i = 0; i < CALLS; i += BATCH) bodies.push(JSON.stringify({ batch: batchItems('bench/ingest', i, Math.min(BATCH, CALLS - i)) }));
let t = performance.now();
for (const body of bodies) await postJson('/call/upsert_batch', body);
const httpMs = performance.now() - t;
bodies.length = 0;
const baselineBatches: never[][] = [];
for (let i = 0; i < CALLS; i += BATCH) baselineBatches.push(baselineRows('bench/baseline', i, Math.min(BATCH, CALLS - i)));
t = performance.now();
for (const rows of baselineBatches) await app.db.insertInto('trace_calls').values(rows).execute();
const baseMs = performance.now() - t;
console.log(`ingest ${CALLS} calls: HTTP upsert_batch ${rate(CALLS, httpMs)} calls/s, baseline INSERT ${rate(CALLS, baseMs)} calls/s, ratio ${((baseMs / httpMs) * 100).toFixed(0)}% (target >= 50%)`);

// The same calls with a 63-bit integer in each one's inputs: such bodies take the exact-number parse
// (src/tracing/exact-numbers.ts) instead of JSON.parse alone.
for (let i = 0; i < CALLS; i += BATCH) {
  bodies.push(JSON.stringify({ batch: batchItems('bench/exact', i, Math.min(BATCH, CALLS - i)) }).replaceAll('{"i":', '{"seed":9223372036854775807,"i":'));
}
t = performance.now();
for (const body of bodies) await postJson('/call/upsert_batch', body);
const exactMs = performance.now() - t;
bodies.length = 0;
console.log(`ingest ${CALLS} calls with a 63-bit integer each: ${rate(CALLS, exactMs)} calls/s, ${((httpMs / exactMs) * 100).toFixed(0)}% of the plain calls' rate`);

// 2. Queries on a big project
const project = 'bench/big';
t = performance.now();
const OPS = 20;
for (let from = 1; from <= BIG; from += 100_000) {
  const to = Math.min(BIG, from + 99_999);
  await sql`insert into trace_calls (project_id, id, trace_id, parent_id, op_name, started_at, ended_at, attributes, inputs, output, summary)
    select ${project}, 'c' || g, 't' || (g / 10), case when g % 10 = 0 then null else 'c' || (g - g % 10) end,
      'weave:///bench/big/op/op' || (g % ${OPS}) || ':d', timestamptz '2025-01-01' + g * interval '10 ms',
      timestamptz '2025-01-01' + g * interval '10 ms' + interval '5 ms', '{}'::jsonb,
      jsonb_build_object('i', g, 'user', 'u' || (g % 1000)), jsonb_build_object('ok', true), '{}'::jsonb
    from generate_series(${from}::int, ${to}::int) g`.execute(app.db);
}
await sql`analyze trace_calls`.execute(app.db);
console.log(`seeded ${BIG} calls in ${((performance.now() - t) / 1000).toFixed(1)} s`);

async function measure(name: string, indexed: boolean, run: () => Promise<unknown>): Promise<void> {
  await run();
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const start = performance.now();
    await run();
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  const p = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))].toFixed(1);
  console.log(`${name.padEnd(34)} p50 ${p(0.5).padStart(7)} ms  p99 ${p(0.99).padStart(7)} ms${indexed ? '  (indexed, target p50 < 20 ms)' : ''}`);
}

await measure('latest 50 root calls', true, () =>
  postJson('/calls/stream_query', { project_id: project, filter: { trace_roots_only: true }, sort_by: [{ field: 'started_at', direction: 'desc' }], limit: 50 }),
);
await measure('filter by op name (50)', true, () => postJson('/calls/stream_query', { project_id: project, filter: { op_names: ['weave:///bench/big/op/op7:d'] }, limit: 50 }));
await measure('$eq on inputs.user (50)', false, () =>
  postJson('/calls/stream_query', { project_id: project, query: { $expr: { $eq: [{ $getField: 'inputs.user' }, { $literal: 'u999' }] } }, limit: 50 }),
);
// A numeric comparison on a JSON path reads every row's value as a number (query/values.ts).
await measure('$eq on inputs.i number (count)', false, () =>
  postJson('/calls/query_stats', { project_id: project, query: { $expr: { $eq: [{ $getField: 'inputs.i' }, { $literal: 7 }] } } }),
);
// Reading payloads back: 2,000 of the ingested calls (about 1 KB of inputs each), plain and with a 63-bit integer.
await measure('stream 2,000 calls (1 KB inputs)', false, () => postJson('/calls/stream_query', { project_id: 'bench/ingest', limit: 2000 }));
await measure('same, a 63-bit integer in each', false, () => postJson('/calls/stream_query', { project_id: 'bench/exact', limit: 2000 }));
let n = 0;
await measure('fetch one trace', true, () => postJson('/calls/stream_query', { project_id: project, filter: { trace_ids: [`t${(n += 7919) % (BIG / 10)}`] } }));
await measure('query_stats (whole project)', false, () => postJson('/calls/query_stats', { project_id: project }));
await measure('query_stats probe (limit 1)', true, () => postJson('/calls/query_stats', { project_id: project, limit: 1 }));

await server.close();
