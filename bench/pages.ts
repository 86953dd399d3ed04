/**
 * Reading long lists in pages by offset, as weave's SDK reads them. Not a test: run by hand, prints
 * seconds and ratios.
 *
 *   npm run bench:pages -- [--calls 200000] [--page 1000] [--rows 20000]
 *
 * Uses DATABASE_URL's server when set (a scratch database is created beside it and dropped), else an
 * embedded PGlite in a temporary directory. In one run:
 *
 * Calls (`client.get_calls()`, pages of 1,000): one project of `--calls` calls (about 600 bytes of inputs
 * each, inserted in SQL), read through /calls/stream_query:
 *   1. Baseline, backward: every page from the last to the first. No page starts where an earlier one
 *      ended, so each counts its offset from the start: what every page cost before.
 *   2. Forward: the same pages from offset 0, as the SDK's iterator reads them. Each page after the first
 *      starts where the page before ended (services/call-pages.ts).
 * Then the last page alone, reached each way.
 *
 * A dataset (a weave table iterated by the SDK, pages of 100 through /table/query): `--rows` rows of
 * about 250 bytes, made with /table/create:
 *   1. Baseline: every page sorted by a field that holds the row's position (the same order), which reads
 *      and orders every row for each page, as every page did before.
 *   2. Every page in insertion order, as the SDK asks, which reads its own rows only.
 */
import { sql } from 'kysely';
import { numberArg } from './lib/args.js';
import { startBenchServer, tracingPoster } from './lib/server.js';

const CALLS = numberArg('calls', 200_000);
const PAGE = numberArg('page', 1000);
const ROWS = numberArg('rows', 20_000);
const ROW_PAGE = 100;
const PROJECT = 'bench/pages';

const server = await startBenchServer('pages');
const post = tracingPoster(server);

// One call through the API makes the project and its owner; the rest are inserted beside it.
const started = '2024-12-31T00:00:00Z';
await post('/call/upsert_batch', { batch: [{ mode: 'start', req: { start: { project_id: PROJECT, id: 'first', trace_id: 'first', op_name: 'op', started_at: started, attributes: {}, inputs: {} } } }] });
const seeding = performance.now();
await sql`insert into trace_calls (project_id, id, trace_id, op_name, started_at, ended_at, attributes, inputs, output, summary, wb_user_id)
  select ${PROJECT}, 'c' || g, 't' || g, 'op', timestamptz '2025-01-01' + g * interval '1 ms', timestamptz '2025-01-01' + g * interval '1 ms' + interval '5 ms',
    '{}'::jsonb, jsonb_build_object('i', g, 'text', repeat('x', 500)), '{"ok": true}'::jsonb, '{}'::jsonb,
    (select wb_user_id from trace_calls where project_id = ${PROJECT} and id = 'first')
  from generate_series(1, ${CALLS - 1}::int) g`.execute(server.app.db);
await sql`analyze trace_calls`.execute(server.app.db);
console.log(`database: ${server.onServer ? 'PostgreSQL server' : 'PGlite (embedded)'}; node ${process.version}; ${CALLS} calls (seeded in ${((performance.now() - seeding) / 1000).toFixed(1)} s), pages of ${PAGE}`);

/** Reads the page at `offset`; its milliseconds and its number of calls. */
async function page(offset: number): Promise<[ms: number, calls: number]> {
  const start = performance.now();
  const text = await post('/calls/stream_query', { project_id: PROJECT, limit: PAGE, offset });
  let calls = 0;
  for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) calls++;
  return [performance.now() - start, calls];
}

const offsets = Array.from({ length: Math.ceil(CALLS / PAGE) }, (_, i) => i * PAGE);
await page(0); // warm-up

let start = performance.now();
let read = 0;
let lastBackward = 0;
for (const offset of [...offsets].reverse()) {
  const [ms, calls] = await page(offset);
  read += calls;
  if (offset === offsets[offsets.length - 1]) lastBackward = ms;
}
const backward = (performance.now() - start) / 1000;
if (read !== CALLS) throw new Error(`backward read ${read} calls, not ${CALLS}`);

start = performance.now();
read = 0;
let lastForward = 0;
for (const offset of offsets) {
  const [ms, calls] = await page(offset);
  read += calls;
  lastForward = ms;
}
const forward = (performance.now() - start) / 1000;
if (read !== CALLS) throw new Error(`forward read ${read} calls, not ${CALLS}`);

console.log(`every page, forward (each after the page before)      ${forward.toFixed(1).padStart(7)} s`);
console.log(`every page, backward (each by OFFSET; the baseline)   ${backward.toFixed(1).padStart(7)} s   forward/backward ${(forward / backward).toFixed(2)}`);
console.log(`the last page, after the page before                  ${lastForward.toFixed(1).padStart(7)} ms`);
console.log(`the last page, by OFFSET                              ${lastBackward.toFixed(1).padStart(7)} ms   ratio ${(lastForward / lastBackward).toFixed(2)}`);

// A dataset, read as the SDK iterates it.
const dataset = Array.from({ length: ROWS }, (_, i) => ({ position: i, question: `What is ${i} plus ${i}? `.repeat(10).trim(), answer: 2 * i }));
const { digest } = JSON.parse(await post('/table/create', { table: { project_id: PROJECT, rows: dataset } })) as { digest: string };
async function readDataset(sorted: boolean): Promise<number> {
  let rows = 0;
  for (let offset = 0; offset < ROWS; offset += ROW_PAGE) {
    const body = { project_id: PROJECT, digest, limit: ROW_PAGE, offset, ...(sorted ? { sort_by: [{ field: 'position', direction: 'asc' }] } : {}) };
    rows += (JSON.parse(await post('/table/query', body)) as { rows: unknown[] }).rows.length;
  }
  if (rows !== ROWS) throw new Error(`read ${rows} rows, not ${ROWS}`);
  return rows;
}
await readDataset(false); // warm-up
start = performance.now();
await readDataset(true);
const sortedSeconds = (performance.now() - start) / 1000;
start = performance.now();
await readDataset(false);
const insertionSeconds = (performance.now() - start) / 1000;
console.log(`dataset of ${ROWS} rows, pages of ${ROW_PAGE}:`);
console.log(`every page, sorted by position (the baseline)         ${sortedSeconds.toFixed(2).padStart(7)} s`);
console.log(`every page, in insertion order                        ${insertionSeconds.toFixed(2).padStart(7)} s   ratio ${(insertionSeconds / sortedSeconds).toFixed(2)}`);
await server.close();
