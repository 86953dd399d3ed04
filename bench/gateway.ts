import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

/**
 * npm run bench:gateway — the inference gateway against its baselines. A fast fake engine, a bare
 * pass-through proxy, a minimal Fastify proxy (bench/lib/fastify-proxy.ts: what the framework itself
 * costs) and trainyard each run in a process of their own; the load generator runs in another. The
 * same load goes straight to the engine, through each proxy and through trainyard, non-streaming and
 * streaming (100 chunks), at concurrency 1 and 64.
 * Targets (issue 12): trainyard ≥ 75% of the bare proxy's req/s at concurrency 64 non-streamed and
 * ≥ 85% streamed, under 0.3 ms added p50 at concurrency 1 (against the bare proxy). DURATION_MS,
 * WARMUP_MS and ROUNDS shorten or lengthen the run, SCENARIOS picks some of the four; PROFILE=<file> profiles trainyard's serving phase
 * (bench/profile-stages.ts reads it by stage).
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Every process runs compiled JavaScript, as `npm start` does: under tsx each closure pays for a
 * name-keeping wrapper, which would charge trainyard (and less so the baselines) for the loader.
 */
function compile(): string {
  const outDir = path.join(root, 'dist', 'bench-gateway');
  fs.mkdirSync(outDir, { recursive: true });
  const tsconfig = path.join(outDir, 'tsconfig.json');
  fs.writeFileSync(
    tsconfig,
    JSON.stringify({
      extends: '../../tsconfig.json',
      compilerOptions: { noEmit: false, rootDir: '../..', outDir: '.', sourceMap: false },
      include: ['../../src', '../../migrations', '../../bench/lib'],
    }),
  );
  // Type errors elsewhere in the tree do not stop the emit; a failure to emit shows below.
  spawnSync(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', tsconfig], { stdio: 'ignore' });
  return path.join(outDir, 'bench', 'lib');
}

const libDir = compile();
const lib = (name: string) => path.join(libDir, name.replace(/\.ts$/, '.js'));
const durationMs = process.env.DURATION_MS ?? '3000';
const warmupMs = process.env.WARMUP_MS ?? '1000';
/** Rounds per scenario, the targets interleaved in each; the median round is reported (the machine may be shared). */
const rounds = Number(process.env.ROUNDS ?? 3);
/** SCENARIOS="json:64 stream:64" runs only those (mode:concurrency); all four by default. */
const scenarios = process.env.SCENARIOS?.split(/[\s,]+/).filter(Boolean);

interface Result {
  requests: number;
  answered: number;
  errors: number;
  /** CPU time (user + system) of the process answering, per answered request, in µs. */
  cpuUs: number;
  rps: number;
  p50: number;
  p99: number;
}

const children: ChildProcess[] = [];

function run(file: string, env: Record<string, string>): ChildProcess {
  if (!fs.existsSync(file)) throw new Error(`${file} was not compiled`);
  const child = spawn(process.execPath, [file], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return child;
}

/** Starts a server process and reads the JSON line it prints when ready. */
async function start<T>(file: string, env: Record<string, string> = {}): Promise<T & { child: ChildProcess }> {
  const child = run(file, env);
  const lines = readline.createInterface({ input: child.stdout! });
  for await (const line of lines) {
    if (line.startsWith('{')) return { ...(JSON.parse(line) as T), child };
  }
  throw new Error(`${file} exited before it was ready`);
}

/** User + system CPU time of a process in µs, from /proc (Linux; NaN elsewhere). */
function cpuTimeUs(pid: number | undefined): number {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS) * 1e6;
  } catch {
    return NaN;
  }
}
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

async function load(target: string, options: { key?: string; concurrency: number; stream: boolean; server: ChildProcess }): Promise<Result> {
  const cpuBefore = cpuTimeUs(options.server.pid);
  const child = run(lib('load.ts'), {
    TARGET: target,
    KEY: options.key ?? '',
    CONCURRENCY: String(options.concurrency),
    STREAM: options.stream ? '1' : '0',
    DURATION_MS: durationMs,
    WARMUP_MS: warmupMs,
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await new Promise((resolve) => child.once('exit', resolve));
  const result = JSON.parse(output.trim().split('\n').at(-1)!) as Omit<Result, 'cpuUs'>;
  return { ...result, cpuUs: (cpuTimeUs(options.server.pid) - cpuBefore) / result.answered };
}

/** Each figure's median over the rounds; errors are summed. */
function median(runs: Result[]): Result {
  const mid = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  return {
    requests: mid(runs.map((r) => r.requests)),
    answered: mid(runs.map((r) => r.answered)),
    errors: runs.reduce((sum, r) => sum + r.errors, 0),
    cpuUs: mid(runs.map((r) => r.cpuUs)),
    rps: mid(runs.map((r) => r.rps)),
    p50: mid(runs.map((r) => r.p50)),
    p99: mid(runs.map((r) => r.p99)),
  };
}

const pad = (text: string | number, width: number) => String(text).padStart(width);
const ms = (value: number) => value.toFixed(2);

try {
  const engine = await start<{ port: number }>(lib('engine.ts'));
  const upstream = `http://127.0.0.1:${engine.port}`;
  const proxy = await start<{ port: number }>(lib('bare-proxy.ts'), { UPSTREAM: upstream });
  const fastifyProxy = await start<{ port: number }>(lib('fastify-proxy.ts'), { UPSTREAM: upstream });
  const trainyard = await start<{ port: number; key: string }>(lib('trainyard.ts'), { UPSTREAM: upstream });
  const targets = {
    direct: { url: upstream, server: engine.child },
    proxy: { url: `http://127.0.0.1:${proxy.port}`, server: proxy.child },
    fastify: { url: `http://127.0.0.1:${fastifyProxy.port}`, server: fastifyProxy.child },
    trainyard: { url: `http://127.0.0.1:${trainyard.port}`, key: trainyard.key, server: trainyard.child },
  };

  console.log(`gateway benchmark: ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? 'unknown'}), node ${process.version}, median of ${rounds} interleaved rounds of ${durationMs} ms after ${warmupMs} ms warm-up`);
  console.log(`${'mode'.padEnd(10)}${pad('conc', 5)}  ${'target'.padEnd(10)}${pad('req/s', 9)}${pad('p50 ms', 9)}${pad('p99 ms', 9)}${pad('errors', 8)}${pad('CPU µs/req', 12)}`);
  const summary: string[] = [];
  let trainyardAnswered = 0;
  for (const stream of [false, true]) {
    for (const concurrency of [1, 64]) {
      if (scenarios && !scenarios.includes(`${stream ? 'stream' : 'json'}:${concurrency}`)) continue;
      const samples: Record<string, Result[]> = { direct: [], proxy: [], fastify: [], trainyard: [] };
      for (let round = 0; round < rounds; round++) {
        for (const [name, target] of Object.entries(targets)) {
          const result = await load(target.url, { key: 'key' in target ? target.key : undefined, concurrency, stream, server: target.server });
          if (name === 'trainyard') trainyardAnswered += result.answered;
          samples[name].push(result);
        }
      }
      const results: Record<string, Result> = {};
      for (const [name, runs] of Object.entries(samples)) {
        const result = median(runs);
        results[name] = result;
        const mode = stream ? 'stream' : 'json';
        console.log(`${mode.padEnd(10)}${pad(concurrency, 5)}  ${name.padEnd(10)}${pad(result.rps.toFixed(0), 9)}${pad(ms(result.p50), 9)}${pad(ms(result.p99), 9)}${pad(result.errors, 8)}${pad(result.cpuUs.toFixed(0), 12)}`);
      }
      const { direct, proxy: bare, fastify, trainyard: ty } = results;
      summary.push(
        `${stream ? 'stream' : 'json'} c=${concurrency}: proxy/direct ${(bare.rps / direct.rps * 100).toFixed(0)}%, ` +
          `trainyard/proxy ${(ty.rps / bare.rps * 100).toFixed(0)}%, trainyard/fastify ${(ty.rps / fastify.rps * 100).toFixed(0)}%, trainyard/direct ${(ty.rps / direct.rps * 100).toFixed(0)}%, ` +
          `added p50 vs direct ${ms(ty.p50 - direct.p50)} ms (proxy ${ms(bare.p50 - direct.p50)} ms), vs proxy ${ms(ty.p50 - bare.p50)} ms, ` +
          `trainyard requests ${ty.requests}`,
      );
    }
  }
  console.log('\nratios');
  console.log(`  trainyard answered ${trainyardAnswered} requests in all, warm-ups included (the count for bench/profile-stages.ts)`);
  for (const line of summary) console.log(`  ${line}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
}
