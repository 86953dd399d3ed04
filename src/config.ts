import path from 'node:path';
import { z } from 'zod';

/**
 * The only reader of process.env. Every setting is parsed once, checked, and frozen;
 * the README's configuration table documents each variable below.
 */

const integer = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^-?\d+$/, `must be an integer from ${min} to ${max}`)
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

const megabytes = (max: number) => integer(1, max).transform((mb) => mb * 1024 * 1024);

const list = z
  .string()
  .transform((value) => value.split(',').map((item) => item.trim()).filter(Boolean));

const boolean = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { error: 'must be true or false (also 1 or 0, yes or no)' })
  .transform((value) => value === 'true' || value === '1' || value === 'yes');

const EnvSchema = z.object({
  PORT: integer(0, 65535).default(8000),
  HOST: z.string().min(1, 'must not be empty').default('127.0.0.1'),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
    .optional(),
  DATABASE_POOL_SIZE: integer(1, 1000).default(10),
  DATABASE_POOL_TIMEOUT_MS: integer(1, 3_600_000).default(5_000),
  DATABASE_STATEMENT_TIMEOUT_MS: integer(100, 3_600_000).default(10_000),
  DATA_DIR: z.string().min(1, 'must not be empty').default('./data'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    })
    .default('info'),
  BODY_LIMIT_MB: megabytes(4096).default(64 * 1024 * 1024),
  REQUEST_TIMEOUT_SECONDS: integer(0, 86_400).default(300),
  SHUTDOWN_GRACE_MS: integer(0, 3_600_000).default(10_000),
  AUTH_CACHE_TTL_MS: integer(0, 3_600_000).default(5_000),
  BOOTSTRAP_ADMIN: boolean.default(true),
  TRAINABLE_BASE_MODELS: list.default([]),
  WORKER_LEASE_SECONDS: integer(5, 86_400).default(60),
  JOB_MAX_ATTEMPTS: integer(1, 100).default(3),
  MAX_RUNNING_JOBS_PER_ENTITY: integer(0, 100_000).default(0),
  WORKER_SEEN_SECONDS: integer(1, 86_400).default(120),
  WORKER_CLAIM_WAITS_PER_KEY: integer(1, 100_000).default(64),
  LEASE_SWEEP_INTERVAL_MS: integer(100, 3_600_000).default(5_000),
  CHECKPOINT_EXPIRY_INTERVAL_MS: integer(100, 86_400_000).default(60_000),
  EMBEDDED_ANALYZE_INTERVAL_MS: integer(100, 86_400_000).default(60_000),
  BACKUP_DIR: z.string().min(1, 'must not be empty').optional(),
  BACKUP_KEEP: integer(0, 100_000).default(0),
  BACKUP_INTERVAL_HOURS: integer(0, 8_760).default(0),
  ADAPTERS_DIR: z.string().min(1, 'must not be empty').optional(),
  ADAPTER_ARCHIVE_LIMIT_MB: megabytes(65_536).default(1024 * 1024 * 1024),
  CHECKPOINT_URI_PREFIXES: list
    .pipe(z.array(z.string().regex(/\/$/, 'each prefix must end with "/"')).min(1, 'must name at least one prefix'))
    .default(['/adapters/', 's3://']),
  SFT_ALLOW_HTTP_URLS: boolean.default(false),
  BACKENDS_FILE: z.string().min(1).optional(),
  USAGE_FLUSH_INTERVAL_MS: integer(10, 60_000).default(1_000),
  SSE_KEEPALIVE_MS: integer(0, 600_000).default(15_000),
  TRACE_FILE_LIMIT_MB: megabytes(4096).default(32 * 1024 * 1024),
  TRAINYARD_URL: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).optional(),
  TRAINYARD_ADMIN_KEY: z.string().min(1).optional(),
  UI_COOKIE_SECURE: boolean.default(false),
});

export type Env = z.input<typeof EnvSchema>;

/** Every variable the server reads (the README's configuration table lists each). */
export const CONFIG_VARIABLES = Object.freeze(Object.keys(EnvSchema.shape));

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databaseUrl: string | undefined;
  readonly databasePoolSize: number;
  /** How long a request waits to connect to PostgreSQL, or for a pooled connection, before it answers 503. */
  readonly databasePoolTimeoutMs: number;
  /** PostgreSQL's statement_timeout for every statement (the client gives up a little later). */
  readonly databaseStatementTimeoutMs: number;
  readonly dataDir: string;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly bodyLimitBytes: number;
  /**
   * How long a client may take to send a whole request, head and body (0: no limit); past it the
   * connection is answered 408 and closed. Responses (streams, long polls) are not limited by it.
   */
  readonly requestTimeoutMs: number;
  readonly shutdownGraceMs: number;
  readonly authCacheTtlMs: number;
  readonly bootstrapAdmin: boolean;
  readonly trainableBaseModels: readonly string[];
  /** A worker's lease on a job lasts this long unless renewed by a heartbeat. */
  readonly workerLeaseSeconds: number;
  /** Attempts a job gets before a retryable failure becomes final. */
  readonly jobMaxAttempts: number;
  /** Jobs of one entity (user or team) that may run at once; 0: no limit. */
  readonly maxRunningJobsPerEntity: number;
  /** The system check's gpu_queue passes when a trainer worker was seen within this window. */
  readonly workerSeenSeconds: number;
  /** Claims one API key may hold waiting (`wait_seconds` > 0) in one process; more are answered 429. */
  readonly workerClaimWaitsPerKey: number;
  readonly leaseSweepIntervalMs: number;
  /** How often each process deletes checkpoints whose TTL passed. */
  readonly checkpointExpiryIntervalMs: number;
  /** Embedded database only: how often it is checked for VACUUM, ANALYZE and CHECKPOINT (src/db/maintenance.ts). */
  readonly embeddedAnalyzeIntervalMs: number;
  /** Embedded database only: where backups are written (src/db/backup.ts). */
  readonly backupDir: string;
  /** Embedded database only: after each backup, this database's older backups past the newest this many are deleted; 0 keeps all. */
  readonly backupKeep: number;
  /** Embedded database only: a backup is taken this often (counted from the newest); 0: only when asked. */
  readonly backupIntervalMs: number;
  /** Where imported adapters are stored (trainyard owns these files); engines must be able to read it. */
  readonly adaptersDir: string;
  /** Bytes of an adapter archive, imported or exported (packed and unpacked). */
  readonly adapterArchiveLimitBytes: number;
  /** A checkpoint URI a worker registers must start with one of these (the engines load what it names). */
  readonly checkpointUriPrefixes: readonly string[];
  /** Whether SFT jobs may name http(s) URLs as training data (a server-side request forgery risk). */
  readonly sftAllowHttpUrls: boolean;
  /** Mark the web UI's session cookie Secure even when the request reached this process over plain http (TLS ends at a proxy). */
  readonly uiCookieSecure: boolean;
  /** The inference backends file (JSON or YAML); unset: no engine configured. */
  readonly backendsFile: string | undefined;
  readonly usageFlushIntervalMs: number;
  /** While a streamed completion waits for its first token, an SSE comment is sent this often (0: never). */
  readonly sseKeepAliveMs: number;
  readonly traceFileLimitBytes: number;
  /** The environment, for the backends file's `api_key_env` references. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /**
   * CLI only: the running server to manage when it holds the embedded database: TRAINYARD_URL, else the address
   * that server recorded in DATA_DIR (src/server.ts), else http://HOST:PORT.
   */
  readonly cliServerUrl: string;
  /** Whether TRAINYARD_URL set cliServerUrl (else the server's recorded address comes first). */
  readonly cliServerUrlSet: boolean;
  /** CLI only: the admin key for that server; DATA_DIR/admin-api-key when unset. */
  readonly cliAdminKey: string | undefined;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * A setting that parsed but could not be used at start (a DATA_DIR that is a file, a HOST that does not
 * resolve, a DATABASE_URL whose server refuses): names the setting, for the user to fix, with the cause.
 */
export class StartError extends Error {
  constructor(setting: string, cause: unknown) {
    super(`${setting}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StartError';
  }
}

/** Whether `error` is one of Node's system errors (`ENOTFOUND`, `EADDRINUSE`, `EEXIST`, …): the machine's answer, not a bug. */
export function isSystemError(error: unknown): error is NodeJS.ErrnoException {
  return error instanceof Error && typeof (error as NodeJS.ErrnoException).code === 'string' && typeof (error as NodeJS.ErrnoException).syscall === 'string';
}

/** A URL as messages may show it: its password replaced by `***`. */
export function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/** Parses the environment (process.env unless given) into a frozen Config, or throws ConfigError. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // An empty variable means "not set": `PORT= npm start` should use the default, not fail.
  const present = Object.fromEntries(
    Object.keys(EnvSchema.shape)
      .filter((key) => env[key] !== undefined && env[key] !== '')
      .map((key) => [key, env[key]]),
  );
  const parsed = EnvSchema.safeParse(present);
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((issue) => {
        const name = String(issue.path[0]);
        return `${name}=${JSON.stringify(present[name])}: ${issue.message}`;
      }),
    );
  }
  const e = parsed.data;
  const backupDir = path.resolve(e.BACKUP_DIR ?? path.join(e.DATA_DIR, 'backups'));
  const pgdata = path.resolve(e.DATA_DIR, 'pgdata');
  if (backupDir === pgdata || backupDir.startsWith(`${pgdata}${path.sep}`)) {
    throw new ConfigError([`BACKUP_DIR=${JSON.stringify(e.BACKUP_DIR)}: must not be inside the database's own directory (${pgdata})`]);
  }
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    databasePoolTimeoutMs: e.DATABASE_POOL_TIMEOUT_MS,
    databaseStatementTimeoutMs: e.DATABASE_STATEMENT_TIMEOUT_MS,
    dataDir: path.resolve(e.DATA_DIR),
    logLevel: e.LOG_LEVEL,
    bodyLimitBytes: e.BODY_LIMIT_MB,
    requestTimeoutMs: e.REQUEST_TIMEOUT_SECONDS * 1000,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    authCacheTtlMs: e.AUTH_CACHE_TTL_MS,
    bootstrapAdmin: e.BOOTSTRAP_ADMIN,
    trainableBaseModels: Object.freeze([...e.TRAINABLE_BASE_MODELS]),
    workerLeaseSeconds: e.WORKER_LEASE_SECONDS,
    jobMaxAttempts: e.JOB_MAX_ATTEMPTS,
    maxRunningJobsPerEntity: e.MAX_RUNNING_JOBS_PER_ENTITY,
    workerSeenSeconds: e.WORKER_SEEN_SECONDS,
    workerClaimWaitsPerKey: e.WORKER_CLAIM_WAITS_PER_KEY,
    leaseSweepIntervalMs: e.LEASE_SWEEP_INTERVAL_MS,
    checkpointExpiryIntervalMs: e.CHECKPOINT_EXPIRY_INTERVAL_MS,
    embeddedAnalyzeIntervalMs: e.EMBEDDED_ANALYZE_INTERVAL_MS,
    backupDir,
    backupKeep: e.BACKUP_KEEP,
    backupIntervalMs: e.BACKUP_INTERVAL_HOURS * 3_600_000,
    adaptersDir: path.resolve(e.ADAPTERS_DIR ?? path.join(e.DATA_DIR, 'adapters')),
    adapterArchiveLimitBytes: e.ADAPTER_ARCHIVE_LIMIT_MB,
    checkpointUriPrefixes: Object.freeze([...e.CHECKPOINT_URI_PREFIXES]),
    sftAllowHttpUrls: e.SFT_ALLOW_HTTP_URLS,
    uiCookieSecure: e.UI_COOKIE_SECURE,
    backendsFile: e.BACKENDS_FILE === undefined ? undefined : path.resolve(e.BACKENDS_FILE),
    usageFlushIntervalMs: e.USAGE_FLUSH_INTERVAL_MS,
    sseKeepAliveMs: e.SSE_KEEPALIVE_MS,
    traceFileLimitBytes: e.TRACE_FILE_LIMIT_MB,
    env: Object.freeze({ ...env }),
    cliServerUrl: (e.TRAINYARD_URL ?? `http://${localAddress(e.HOST)}:${e.PORT}`).replace(/\/+$/, ''),
    cliServerUrlSet: e.TRAINYARD_URL !== undefined,
    cliAdminKey: e.TRAINYARD_ADMIN_KEY,
  });
}

/** Where a local client reaches a server bound to `host` (a wildcard bind is reached on loopback). */
export function localAddress(host: string): string {
  if (host === '0.0.0.0' || host === '::') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}
