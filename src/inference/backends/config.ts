import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

/**
 * The backends file: which engines serve which base models. JSON or YAML (JSON is YAML, so one parser
 * reads both). The API key is never written in the file, only the name of the variable holding it.
 */

const duration = (fallback: number) => z.number().int().min(1).max(86_400_000).default(fallback);

const ReplicaUrl = z
  .string()
  .refine((value) => URL.canParse(value) && /^https?:$/.test(new URL(value).protocol), 'must be an http:// or https:// URL');

const BackendFileEntry = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9._-]+$/, 'must be letters, digits, ".", "_" or "-"'),
    kind: z.literal('openai-compatible'),
    replicas: z.array(ReplicaUrl).min(1),
    api_key_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name').optional(),
    /** Base model names, or "discover" to read them from the replicas' /v1/models. */
    models: z.union([z.array(z.string().min(1)).min(1), z.literal('discover')]).default('discover'),
    runtime_lora: z.boolean().default(false),
    priority_scheduling: z.boolean().default(false),
    timeouts: z
      .object({
        connect_ms: duration(5_000),
        first_byte_ms: duration(120_000),
        idle_ms: duration(60_000),
        total_ms: duration(1_800_000),
        adapter_load_ms: duration(120_000),
      })
      .strict()
      .prefault({}),
    adapter_paths: z
      .array(z.object({ prefix: z.string().min(1), path: z.string().min(1) }).strict())
      .default([]),
  })
  .strict();

const BackendsFile = z
  .object({ backends: z.array(BackendFileEntry) })
  .strict()
  .superRefine((file, ctx) => {
    const seen = new Set<string>();
    file.backends.forEach((backend, i) => {
      if (seen.has(backend.name)) ctx.addIssue({ code: 'custom', path: ['backends', i, 'name'], message: `duplicate backend name ${backend.name}` });
      seen.add(backend.name);
    });
  });

export interface BackendTimeouts {
  readonly connectMs: number;
  /** From sending the request to the first byte of the response body. */
  readonly firstByteMs: number;
  /** Between two body chunks once the first has arrived. */
  readonly idleMs: number;
  /** The whole exchange, streaming included. */
  readonly totalMs: number;
  readonly adapterLoadMs: number;
}

export interface AdapterPathRewrite {
  readonly prefix: string;
  readonly path: string;
}

export interface BackendConfig {
  readonly name: string;
  readonly kind: 'openai-compatible';
  /** Replica base URLs without a trailing slash or `/v1`. */
  readonly replicas: readonly string[];
  readonly apiKey: string | undefined;
  /** The environment variable the key was read from, for error messages (never the key itself). */
  readonly apiKeyEnv?: string;
  /** Base model names, or 'discover' to read them from the replicas. */
  readonly models: readonly string[] | 'discover';
  readonly runtimeLora: boolean;
  readonly priorityScheduling: boolean;
  readonly timeouts: BackendTimeouts;
  readonly adapterPaths: readonly AdapterPathRewrite[];
}

export class BackendsConfigError extends Error {
  constructor(
    readonly source: string,
    readonly problems: string[],
  ) {
    super(`Invalid backends file ${source}:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'BackendsConfigError';
  }
}

/** Reads and checks the backends file; `env` supplies the variables that hold API keys. */
export async function loadBackendsFile(path: string, env: Readonly<Record<string, string | undefined>>): Promise<BackendConfig[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new BackendsConfigError(path, [`cannot read the file: ${(error as Error).message}`]);
  }
  return parseBackends(text, path, env);
}

export function parseBackends(text: string, source: string, env: Readonly<Record<string, string | undefined>>): BackendConfig[] {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new BackendsConfigError(source, [`not valid JSON or YAML: ${(error as Error).message}`]);
  }
  const parsed = BackendsFile.safeParse(raw ?? {});
  if (!parsed.success) {
    throw new BackendsConfigError(
      source,
      parsed.error.issues.map((issue) => `${formatPath(issue.path)}: ${issue.message}`),
    );
  }

  const problems: string[] = [];
  const backends = parsed.data.backends.map((entry, i): BackendConfig => {
    let apiKey: string | undefined;
    if (entry.api_key_env !== undefined) {
      apiKey = env[entry.api_key_env];
      if (!apiKey) problems.push(`backends[${i}].api_key_env: environment variable ${entry.api_key_env} is not set`);
    }
    return Object.freeze({
      name: entry.name,
      kind: entry.kind,
      replicas: Object.freeze(entry.replicas.map(normaliseReplicaUrl)),
      apiKey,
      apiKeyEnv: entry.api_key_env,
      models: entry.models === 'discover' ? 'discover' : Object.freeze([...entry.models]),
      runtimeLora: entry.runtime_lora,
      priorityScheduling: entry.priority_scheduling,
      timeouts: Object.freeze({
        connectMs: entry.timeouts.connect_ms,
        firstByteMs: entry.timeouts.first_byte_ms,
        idleMs: entry.timeouts.idle_ms,
        totalMs: entry.timeouts.total_ms,
        adapterLoadMs: entry.timeouts.adapter_load_ms,
      }),
      adapterPaths: Object.freeze(entry.adapter_paths.map((rule) => Object.freeze({ ...rule }))),
    });
  });
  if (problems.length > 0) throw new BackendsConfigError(source, problems);
  return backends;
}

function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return '(top level)';
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i === 0 ? '' : '.'}${String(p)}`)).join('');
}

/** Users paste either `http://host:8000` or `http://host:8000/v1`; requests add `/v1/...` themselves. */
function normaliseReplicaUrl(value: string): string {
  return value.replace(/\/+$/, '').replace(/\/v1$/, '');
}

/**
 * The engine-visible path of a checkpoint's adapter: the longest matching prefix rule rewritten,
 * or the URI unchanged when no rule matches.
 */
export function adapterPathFor(backend: Pick<BackendConfig, 'adapterPaths'>, uri: string): string {
  let best: AdapterPathRewrite | undefined;
  for (const rule of backend.adapterPaths) {
    if (uri.startsWith(rule.prefix) && (!best || rule.prefix.length > best.prefix.length)) best = rule;
  }
  return best ? best.path + uri.slice(best.prefix.length) : uri;
}
