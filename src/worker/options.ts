import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { JobKind } from '../training/schemas.js';
import { splitCommandLine } from './command.js';
import { RESIDENT_OFFER_ENV } from './trainer-process.js';

/**
 * The worker CLI's options: flags, with a few environment fallbacks. This module is the worker's only
 * reader of the environment (the server's is src/config.ts); everything else receives `WorkerOptions`.
 */

export const WORKER_USAGE = `Usage: trainyard-worker --server URL --command "TRAINER COMMAND LINE" [options]
       trainyard-worker --server URL [options] -- TRAINER COMMAND [ARGS...]

  --server URL             trainyard base URL (env TRAINYARD_URL)
  --key KEY                worker API key (env TRAINYARD_WORKER_KEY; prefer the variable: flags show in ps)
  --command LINE           trainer command line; the job spec path is appended as its last argument
  --kinds rl,sft           job kinds to claim (default: any)
  --base-models A,B        base models to claim (default: any)
  --concurrency N          jobs at once (default 1)
  --work-dir DIR           inputs and spec files (default ./trainyard-work)
  --output-dir DIR         where trainers write checkpoints (default WORK_DIR/checkpoints)
  --release-seconds N      how often deleted checkpoints' directories under the output dir are deleted
                           (default 60; 0: never)
  --worker-id ID           (default HOSTNAME-PID)
  --cancel-grace-seconds N SIGTERM -> SIGKILL of a trainer (default 30)
  --resident on|off        offer the trainer to stay loaded between jobs (default on)
  --drain-seconds N        on worker SIGTERM, how long running jobs may finish (default 300)
  --heartbeat-seconds N    (default: a third of the lease)
  --event-window-ms N      events are posted in batches at most this often (default 250)
  --poll-seconds N         long-poll of one claim, 0..30 (default 30)
  --log-level LEVEL        fatal|error|warn|info|debug|trace|silent (default info)
  -h, --help`;

export interface WorkerOptions {
  readonly serverUrl: string;
  readonly key: string;
  /** argv of the trainer; the spec path is appended. */
  readonly command: readonly string[];
  readonly kinds: readonly JobKind[] | undefined;
  readonly baseModels: readonly string[] | undefined;
  readonly concurrency: number;
  readonly workDir: string;
  readonly outputDir: string;
  /** How often the storage of deleted checkpoints is released (docs/worker-runtime.md); 0: never. */
  readonly releaseMs: number;
  readonly workerId: string;
  readonly cancelGraceMs: number;
  readonly drainMs: number;
  /** Undefined: a third of the lease the server granted. */
  readonly heartbeatMs: number | undefined;
  readonly eventWindowMs: number;
  readonly pollSeconds: number;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** The trainer's environment: the worker's own, less the worker key and the residency offer. */
  readonly trainerEnv: Readonly<Record<string, string | undefined>>;
  /** Offer trainers residency (docs/worker-runtime.md#resident-trainers). */
  readonly resident: boolean;
}

export class WorkerUsageError extends Error {
  override name = 'WorkerUsageError';
}

/** `--command`'s words; a line that does not split (an unterminated quote) is a usage error. */
function commandWords(line: string): string[] {
  try {
    return splitCommandLine(line);
  } catch (error) {
    throw new WorkerUsageError(`--command: ${(error as Error).message}`);
  }
}

/**
 * Variables the trainer must not inherit: it has no business calling the worker protocol, and the residency
 * offer is the worker's to make (--resident), not something left over in its environment.
 */
const PRIVATE_VARIABLES = ['TRAINYARD_WORKER_KEY', RESIDENT_OFFER_ENV];

const number = (name: string, min: number, max: number) =>
  z.coerce
    .number({ error: `--${name} must be a number` })
    .min(min, `--${name} must be at least ${min}`)
    .max(max, `--${name} must be at most ${max}`);

const list = z
  .string()
  .transform((value) => value.split(',').map((item) => item.trim()).filter(Boolean))
  .transform((items) => (items.length ? items : undefined));

const Flags = z.object({
  server: z
    .url({ protocol: /^https?$/, error: '--server must be an http:// or https:// URL' })
    .transform((url) => url.replace(/\/+$/, '')),
  key: z.string({ error: '--key or TRAINYARD_WORKER_KEY is required' }).min(1, '--key must not be empty'),
  kinds: list.pipe(z.array(z.enum(JobKind.options, { error: '--kinds takes rl and/or sft' })).optional()).optional(),
  'base-models': list.optional(),
  concurrency: number('concurrency', 1, 256).int('--concurrency must be an integer').default(1),
  'work-dir': z.string().min(1).default('trainyard-work'),
  'output-dir': z.string().min(1).optional(),
  'release-seconds': number('release-seconds', 0, 86_400).default(60),
  'worker-id': z.string().min(1).max(200).default(`${os.hostname()}-${process.pid}`),
  'cancel-grace-seconds': number('cancel-grace-seconds', 0, 86_400).default(30),
  resident: z.enum(['on', 'off'], { error: '--resident must be on or off' }).default('on'),
  'drain-seconds': number('drain-seconds', 0, 7 * 86_400).default(300),
  'heartbeat-seconds': number('heartbeat-seconds', 0.1, 86_400).optional(),
  'event-window-ms': number('event-window-ms', 0, 60_000).default(250),
  'poll-seconds': number('poll-seconds', 0, 30).default(30),
  'log-level': z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], { error: '--log-level must be one of fatal, error, warn, info, debug, trace, silent' })
    .default('info'),
});

/** The environment variables the worker reads (the README's configuration table lists them with the server's). */
export const WORKER_ENV_VARIABLES = Object.freeze(['TRAINYARD_URL', 'TRAINYARD_WORKER_KEY'] as const);

/**
 * Parses the command line and the environment into options, or throws WorkerUsageError with a message
 * for the user. `help: true` when the user asked for the usage text.
 */
export function loadWorkerOptions(
  argv: readonly string[] = process.argv.slice(2),
  env: Readonly<Record<string, string | undefined>> = process.env,
): { help: true } | { help: false; options: WorkerOptions } {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        server: { type: 'string' },
        key: { type: 'string' },
        command: { type: 'string' },
        kinds: { type: 'string' },
        'base-models': { type: 'string' },
        concurrency: { type: 'string' },
        'work-dir': { type: 'string' },
        'output-dir': { type: 'string' },
        'release-seconds': { type: 'string' },
        'worker-id': { type: 'string' },
        'cancel-grace-seconds': { type: 'string' },
        resident: { type: 'string' },
        'drain-seconds': { type: 'string' },
        'heartbeat-seconds': { type: 'string' },
        'event-window-ms': { type: 'string' },
        'poll-seconds': { type: 'string' },
        'log-level': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new WorkerUsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help) return { help: true };

  const present = (value: string | undefined) => (value === undefined || value === '' ? undefined : value);
  const flags = Flags.safeParse({
    ...Object.fromEntries(Object.entries(values).filter(([, value]) => value !== undefined)),
    server: present(values.server) ?? present(env.TRAINYARD_URL),
    key: present(values.key) ?? present(env.TRAINYARD_WORKER_KEY),
  });
  if (!flags.success) {
    const problem = flags.error.issues[0];
    const message = problem.code === 'invalid_type' && problem.path[0] === 'server' ? '--server or TRAINYARD_URL is required' : problem.message;
    throw new WorkerUsageError(message);
  }
  const f = flags.data;

  if (values.command !== undefined && positionals.length > 0) {
    throw new WorkerUsageError('give the trainer command either with --command or after --, not both');
  }
  const command = values.command !== undefined ? commandWords(values.command) : positionals;
  if (command.length === 0) throw new WorkerUsageError('--command (or a command after --) is required');

  const workDir = path.resolve(f['work-dir']);
  const trainerEnv = Object.fromEntries(Object.entries(env).filter(([name]) => !PRIVATE_VARIABLES.includes(name)));
  return {
    help: false,
    options: Object.freeze({
      serverUrl: f.server,
      key: f.key,
      command: Object.freeze(command),
      kinds: f.kinds,
      baseModels: f['base-models'],
      concurrency: f.concurrency,
      workDir,
      outputDir: path.resolve(f['output-dir'] ?? path.join(workDir, 'checkpoints')),
      releaseMs: f['release-seconds'] * 1000,
      workerId: f['worker-id'],
      cancelGraceMs: f['cancel-grace-seconds'] * 1000,
      drainMs: f['drain-seconds'] * 1000,
      heartbeatMs: f['heartbeat-seconds'] === undefined ? undefined : f['heartbeat-seconds'] * 1000,
      eventWindowMs: f['event-window-ms'],
      pollSeconds: f['poll-seconds'],
      logLevel: f['log-level'],
      trainerEnv: Object.freeze(trainerEnv),
      resident: f.resident === 'on',
    }),
  };
}
