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
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { error: 'must be true or false' })
  .transform((value) => value === 'true' || value === '1' || value === 'yes');

const EnvSchema = z.object({
  PORT: integer(0, 65535).default(8000),
  HOST: z.string().min(1, 'must not be empty').default('127.0.0.1'),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
    .optional(),
  DATABASE_POOL_SIZE: integer(1, 1000).default(10),
  DATA_DIR: z.string().min(1, 'must not be empty').default('./data'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    })
    .default('info'),
  BODY_LIMIT_MB: megabytes(4096).default(64),
  SHUTDOWN_GRACE_MS: integer(0, 3_600_000).default(10_000),
  AUTH_CACHE_TTL_MS: integer(0, 3_600_000).default(5_000),
  BOOTSTRAP_ADMIN: boolean.default(true),
  TRAINABLE_BASE_MODELS: list.default([]),
});

export type Env = z.input<typeof EnvSchema>;

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databaseUrl: string | undefined;
  readonly databasePoolSize: number;
  readonly dataDir: string;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly bodyLimitBytes: number;
  readonly shutdownGraceMs: number;
  readonly authCacheTtlMs: number;
  readonly bootstrapAdmin: boolean;
  readonly trainableBaseModels: readonly string[];
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
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
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    dataDir: path.resolve(e.DATA_DIR),
    logLevel: e.LOG_LEVEL,
    bodyLimitBytes: e.BODY_LIMIT_MB,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    authCacheTtlMs: e.AUTH_CACHE_TTL_MS,
    bootstrapAdmin: e.BOOTSTRAP_ADMIN,
    trainableBaseModels: Object.freeze([...e.TRAINABLE_BASE_MODELS]),
  });
}
