import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino, type Logger } from 'pino';
import type { App } from '../../src/app.js';
import type { JobOutcome } from '../../src/worker/job-run.js';
import { Worker, type WorkerSettings } from '../../src/worker/worker.js';
import { createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';

/** The worker runtime against a real server on loopback, with the fixture trainer as its command. */

export const FIXTURE_TRAINER = path.resolve('test/fixtures/trainer.mjs');
export const TRAINER_COMMAND = [process.execPath, FIXTURE_TRAINER];

/** Short leases so that a dead worker's job comes back within seconds; checkpoints are written under the temp dir. */
export const SERVER_ENV = {
  WORKER_LEASE_SECONDS: '5',
  LEASE_SWEEP_INTERVAL_MS: '200',
  JOB_MAX_ATTEMPTS: '2',
  CHECKPOINT_URI_PREFIXES: path.join(os.tmpdir(), '/'),
};

export interface Tenant {
  user: TestUser;
  workerKey: string;
  /** A base model no other test uses: each test's workers claim only its own jobs. */
  baseModel: string;
  /** A work dir, output dir and fixture log of this test's own. */
  dir: string;
  fixtureLog: string;
}

export async function createTenant(app: App): Promise<Tenant> {
  const user = await createUserWithKey(app, { prefix: 'trainer' });
  const { key } = await createWorkerKey(app, user.username);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-it-'));
  return { user, workerKey: key, baseModel: uniqueName('base'), dir, fixtureLog: path.join(dir, 'fixture.log') };
}

/** A training API call with the tenant's user key; throws unless it answers 200. */
export async function call(app: App, tenant: Tenant, method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown) {
  const response = await app.inject({
    method,
    url,
    headers: { ...tenant.user.headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.statusCode !== 200) throw new Error(`${method} ${url}: ${response.statusCode} ${response.body}`);
  return response.json();
}

const GROUP = { trajectories: [{ messages_and_choices: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }], reward: 1 }] };

/** A model and an RL job of `groups` trajectory groups; `fixture` options go into experimental_config. */
export async function createJob(
  app: App,
  tenant: Tenant,
  fixture: Record<string, unknown> = {},
  groups = 2,
): Promise<{ modelId: string; jobId: string }> {
  const model = await call(app, tenant, 'POST', '/v1/preview/models', { project: 'worker', name: uniqueName('model'), base_model: tenant.baseModel });
  const job = await call(app, tenant, 'POST', '/v1/preview/training-jobs', {
    model_id: model.id,
    trajectory_groups: Array.from({ length: groups }, () => GROUP),
    experimental_config: { learning_rate: 1e-5, ...fixture },
  });
  return { modelId: model.id, jobId: job.id };
}

export async function getJob(app: App, tenant: Tenant, jobId: string) {
  return call(app, tenant, 'GET', `/v1/preview/training-jobs/${jobId}`);
}

export async function listEvents(app: App, tenant: Tenant, jobId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
  return (await call(app, tenant, 'GET', `/v1/preview/training-jobs/${jobId}/events?limit=100`)).data;
}

export async function listCheckpoints(app: App, tenant: Tenant, modelId: string): Promise<{ id: string; step: number; metrics: Record<string, number> }[]> {
  return (await call(app, tenant, 'GET', `/v1/preview/models/${modelId}/checkpoints`)).data;
}

export async function cancelJob(app: App, tenant: Tenant, jobId: string) {
  return call(app, tenant, 'POST', `/v1/preview/training-jobs/${jobId}/cancel`);
}

/** Waits until the job reaches one of `statuses`, and returns it. */
export async function waitForStatus(app: App, tenant: Tenant, jobId: string, statuses: string[], timeoutMs = 20_000) {
  let job: { status: string } | undefined;
  await waitFor(async () => {
    job = await getJob(app, tenant, jobId);
    return statuses.includes(job!.status);
  }, timeoutMs, () => `job ${jobId} is ${job?.status}, not ${statuses.join('|')}`);
  return job as Awaited<ReturnType<typeof getJob>>;
}

export async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 20_000, describe = () => 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting: ${describe()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Lines the fixture trainer appended to its log: one per run, `job attempt pid specInEnv`. */
export function fixtureRuns(tenant: Tenant): { jobId: string; attempt: number; pid: number }[] {
  if (!fs.existsSync(tenant.fixtureLog)) return [];
  return fs
    .readFileSync(tenant.fixtureLog, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [jobId, attempt, pid] = line.split(' ');
      return { jobId, attempt: Number(attempt), pid: Number(pid) };
    });
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The worker as a library, in this process. */
export function startWorker(
  baseUrl: string,
  tenant: Tenant,
  overrides: Partial<WorkerSettings> = {},
  logger: Logger = pino({ level: 'silent' }),
): { worker: Worker; outcomes: Map<string, JobOutcome>; done: Promise<void>; settings: WorkerSettings } {
  const settings: WorkerSettings = {
    serverUrl: baseUrl,
    key: tenant.workerKey,
    command: TRAINER_COMMAND,
    kinds: undefined,
    baseModels: [tenant.baseModel],
    concurrency: 1,
    workDir: path.join(tenant.dir, 'work'),
    outputDir: path.join(tenant.dir, 'adapters'),
    releaseMs: 0,
    workerId: uniqueName('worker'),
    cancelGraceMs: 5_000,
    drainMs: 10_000,
    heartbeatMs: undefined,
    eventWindowMs: 50,
    pollSeconds: 1,
    trainerEnv: { PATH: process.env.PATH, TRAINER_FIXTURE_LOG: tenant.fixtureLog },
    resident: true,
    ...overrides,
  };
  const outcomes = new Map<string, JobOutcome>();
  const worker = new Worker(settings, logger, (jobId, outcome) => outcomes.set(jobId, outcome));
  return { worker, outcomes, done: worker.run(), settings };
}

export interface CliWorker {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The worker CLI as its own process, as an operator runs it. */
export function startCliWorker(baseUrl: string, tenant: Tenant, args: string[] = [], env: Record<string, string> = {}): CliWorker {
  const child = spawn(
    process.execPath,
    [
      '--import', 'tsx', 'src/worker/main.ts',
      '--server', baseUrl,
      '--base-models', tenant.baseModel,
      '--work-dir', path.join(tenant.dir, 'work'),
      '--output-dir', path.join(tenant.dir, 'adapters'),
      '--poll-seconds', '1',
      '--event-window-ms', '50',
      '--log-level', 'debug',
      ...args,
      // The fixture trainer, unless the test names a command of its own.
      ...(args.includes('--command') ? [] : ['--', ...TRAINER_COMMAND]),
    ],
    {
      env: { PATH: process.env.PATH, TRAINYARD_WORKER_KEY: tenant.workerKey, TRAINER_FIXTURE_LOG: tenant.fixtureLog, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: () => output, exited };
}
