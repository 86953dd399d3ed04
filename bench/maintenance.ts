/**
 * The embedded database under weave's everyday writes, with and without its maintenance. Not a test: run by
 * hand, prints sizes, times and ratios.
 *
 *   npm run bench:maintenance -- [--rounds 20] [--calls 2000]
 *
 * PGlite only (a PostgreSQL server runs its own autovacuum). Two servers, one after the other, each in
 * its own data directory, take the same writes through the HTTP API: `--rounds` rounds of `--calls`
 * calls, each call's start in one /call/upsert_batch and its end in the next (as the SDK sends a call
 * that outlasts its flush interval), and after every second round the older round's calls deleted
 * (/calls/delete). After every round each server runs the maintenance check, as its timer would:
 *   1. Baseline: ANALYZE only, what trainyard did before it vacuumed.
 *   2. VACUUM, ANALYZE and VACUUM (FREEZE) by autovacuum's rules, CHECKPOINT past 64 MB of log
 *      (src/db/maintenance.ts).
 * Printed for each: the calls table's size and the data directory's, the write-ahead log since the last
 * checkpoint, how long a copy of the data directory taken at the end (as a kill would leave it) takes to
 * open, the time the checks held the database, and the median time of a traces page
 * (/calls/stream_query, the newest 100 calls).
 */
import fs from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { createPglite, pgliteDataPath } from '../src/db/index.js';
import { maintainTables, walSinceCheckpoint } from '../src/db/maintenance.js';
import { numberArg } from './lib/args.js';
import { startBenchServer, tracingPoster, type BenchServer } from './lib/server.js';

const ROUNDS = numberArg('rounds', 20);
const CALLS = numberArg('calls', 2000);
const PROJECT = 'bench/maintenance';
if (process.env.DATABASE_URL) throw new Error('bench:maintenance measures the embedded database: unset DATABASE_URL');

interface Outcome {
  tableBytes: number;
  dataDirBytes: number;
  walBytes: number;
  crashOpenSeconds: number;
  maintenanceSeconds: number;
  pageMs: number;
  transactions: number;
}

function directoryBytes(dir: string): number {
  let bytes = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    bytes += entry.isDirectory() ? directoryBytes(file) : fs.statSync(file).size;
  }
  return bytes;
}

async function run(vacuum: boolean): Promise<Outcome> {
  // The app's own timer stays out of the way: this script runs each check itself.
  const server: BenchServer = await startBenchServer('maintenance', { EMBEDDED_ANALYZE_INTERVAL_MS: '86400000' });
  const post = tracingPoster(server);
  const xid = async (): Promise<number> => Number((await sql<{ xid: string }>`select txid_current()::text as xid`.execute(server.app.db)).rows[0].xid);
  const firstXid = await xid();
  let maintenanceSeconds = 0;
  let written = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const ids = Array.from({ length: CALLS }, (_, i) => `r${round}-c${i}`);
    const started = new Date(Date.UTC(2025, 0, 1) + written * 10);
    const starts = ids.map((id, i) => ({
      mode: 'start',
      req: { start: { project_id: PROJECT, id, trace_id: id, op_name: 'weave:///bench/maintenance/op/rollout:abc', started_at: new Date(started.getTime() + i * 10).toISOString(), attributes: {}, inputs: { prompt: `Solve puzzle ${id}. `.repeat(40), step: round } } },
    }));
    const ends = ids.map((id, i) => ({
      mode: 'end',
      req: { end: { project_id: PROJECT, id, ended_at: new Date(started.getTime() + i * 10 + 5).toISOString(), output: { answer: `answer ${i} `.repeat(20), reward: 1.0 }, summary: {} } },
    }));
    for (let i = 0; i < CALLS; i += 500) await post('/call/upsert_batch', { batch: starts.slice(i, i + 500) });
    for (let i = 0; i < CALLS; i += 500) await post('/call/upsert_batch', { batch: ends.slice(i, i + 500) });
    written += CALLS;
    if (round % 2 === 1) {
      // The older of the two rounds goes: a cleanup, made up for by the next round's writes.
      const old = Array.from({ length: CALLS }, (_, i) => `r${round - 1}-c${i}`);
      for (let i = 0; i < old.length; i += 1000) await post('/calls/delete', { project_id: PROJECT, call_ids: old.slice(i, i + 1000) });
    }
    const start = performance.now();
    await maintainTables(server.app.db, { analyzeOnly: !vacuum });
    maintenanceSeconds += (performance.now() - start) / 1000;
  }
  const transactions = (await xid()) - firstXid;
  const times: number[] = [];
  for (let i = 0; i < 15; i++) {
    const start = performance.now();
    await post('/calls/stream_query', { project_id: PROJECT, limit: 100, sort_by: [{ field: 'started_at', direction: 'desc' }] });
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  const { rows } = await sql<{ bytes: string }>`select pg_total_relation_size('trace_calls')::text as bytes`.execute(server.app.db);
  const walBytes = await walSinceCheckpoint(server.app.db);
  // The files as a kill would leave them (PGlite writes through on every write; it is idle now).
  const crashed = fs.mkdtempSync(path.join(path.dirname(server.app.config.dataDir), 'trainyard-crashed-'));
  fs.cpSync(pgliteDataPath(server.app.config.dataDir), crashed, { recursive: true });
  const dataDirBytes = directoryBytes(server.app.config.dataDir);
  await server.close();
  const opening = performance.now();
  const reopened = await createPglite({ dataDir: crashed });
  await reopened.query('select 1');
  const crashOpenSeconds = (performance.now() - opening) / 1000;
  await reopened.close();
  fs.rmSync(crashed, { recursive: true, force: true });
  return { tableBytes: Number(rows[0].bytes), dataDirBytes, walBytes, crashOpenSeconds, maintenanceSeconds, pageMs: times[7], transactions };
}

const baseline = await run(false);
const maintained = await run(true);
const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1).padStart(7)} MB`;
console.log(`PGlite (embedded); node ${process.version}; ${ROUNDS} rounds of ${CALLS} calls (start, then end), the older round of each two deleted: ${(ROUNDS * CALLS) / 2} calls kept`);
console.log(`                          ANALYZE only (baseline)   all maintenance      ratio`);
console.log(`trace_calls, all forks    ${mb(baseline.tableBytes)}                ${mb(maintained.tableBytes)}           ${(maintained.tableBytes / baseline.tableBytes).toFixed(2)}`);
console.log(`data directory            ${mb(baseline.dataDirBytes)}                ${mb(maintained.dataDirBytes)}           ${(maintained.dataDirBytes / baseline.dataDirBytes).toFixed(2)}`);
console.log(`log since checkpoint     ${mb(baseline.walBytes)}                ${mb(maintained.walBytes)}           ${(maintained.walBytes / baseline.walBytes).toFixed(2)}`);
console.log(`open after a kill         ${baseline.crashOpenSeconds.toFixed(2).padStart(7)} s                 ${maintained.crashOpenSeconds.toFixed(2).padStart(7)} s            ${(maintained.crashOpenSeconds / baseline.crashOpenSeconds).toFixed(2)}`);
console.log(`checks, in all            ${baseline.maintenanceSeconds.toFixed(2).padStart(7)} s                 ${maintained.maintenanceSeconds.toFixed(2).padStart(7)} s            ${(maintained.maintenanceSeconds / baseline.maintenanceSeconds).toFixed(2)}`);
console.log(`newest 100 calls, median  ${baseline.pageMs.toFixed(1).padStart(7)} ms                ${maintained.pageMs.toFixed(1).padStart(7)} ms           ${(maintained.pageMs / baseline.pageMs).toFixed(2)}`);
console.log(`transaction ids used      ${String(baseline.transactions).padStart(7)}                   ${String(maintained.transactions).padStart(7)}`);
