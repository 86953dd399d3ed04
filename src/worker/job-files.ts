import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { ClaimedJob } from '../training/schemas.js';

/**
 * The job spec file a trainer command reads (docs/worker-runtime.md, "The command contract"). Its path is
 * the command's last argument and TRAINYARD_JOB_SPEC. Versioned so that a trainer can refuse a layout it
 * does not know.
 */
export interface JobSpec {
  spec_version: 1;
  job: { id: string; kind: ClaimedJob['kind']; attempt: number };
  model: ClaimedJob['model'];
  /** The checkpoint to start from, or null to start from the base model. */
  base_checkpoint: ClaimedJob['base_checkpoint'];
  /** `base_checkpoint.uri`, or null: the one field most trainers need. */
  base_checkpoint_uri: string | null;
  /**
   * RL: the checkpoint the KL penalty compares against, as the server resolved it (null: none, or the base
   * model); absent when the server does not resolve it (older servers).
   */
  kl_reference_checkpoint?: ClaimedJob['kl_reference_checkpoint'];
  /** The step the new checkpoint will be registered at. */
  target_step: number;
  /** RL: the job's experimental_config; SFT: its config and experimental_config (as the server sends them). */
  config: Record<string, unknown>;
  /** JSON Lines: one trajectory group (RL) or training row (SFT) per line. */
  inputs_path: string;
  num_inputs: number;
  /** An empty directory for the new checkpoint; it outlives the job (engines load adapters from it). */
  output_dir: string;
  worker_id: string;
}

export interface JobPaths {
  /** Holds the spec and the inputs; removed after the job. */
  dir: string;
  spec: string;
  inputs: string;
  output: string;
}

/**
 * Where one attempt's files go. The job directory is per attempt so that a retry never reads a previous
 * attempt's half-written inputs; the output directory is per model and step (ids and integers only, never
 * names a user chose, so nothing can climb out of the output root).
 */
export function jobPaths(roots: { workDir: string; outputDir: string }, job: Pick<ClaimedJob, 'id' | 'attempt' | 'model' | 'target_step'>): JobPaths {
  const dir = path.join(roots.workDir, 'jobs', `${job.id}-attempt-${job.attempt}`);
  return {
    dir,
    spec: path.join(dir, 'spec.json'),
    inputs: path.join(dir, 'inputs.jsonl'),
    output: path.join(roots.outputDir, job.model.id, `step-${job.target_step}`),
  };
}

export function buildJobSpec(job: ClaimedJob, paths: JobPaths, workerId: string): JobSpec {
  return {
    spec_version: 1,
    job: { id: job.id, kind: job.kind, attempt: job.attempt },
    model: job.model,
    base_checkpoint: job.base_checkpoint,
    base_checkpoint_uri: job.base_checkpoint?.uri ?? null,
    ...(job.kl_reference_checkpoint === undefined ? {} : { kl_reference_checkpoint: job.kl_reference_checkpoint }),
    target_step: job.target_step,
    config: job.config,
    inputs_path: paths.inputs,
    num_inputs: job.num_inputs,
    output_dir: paths.output,
    worker_id: workerId,
  };
}

/**
 * Creates the job directory with this process's owner record, and an empty output directory (left over from
 * a failed attempt: cleared).
 */
export async function prepareJobDirs(paths: JobPaths): Promise<void> {
  await fs.rm(paths.dir, { recursive: true, force: true });
  await fs.mkdir(paths.dir, { recursive: true });
  await fs.writeFile(path.join(paths.dir, OWNER_FILE), `${JSON.stringify(await currentOwner())}\n`);
  await fs.rm(paths.output, { recursive: true, force: true });
  await fs.mkdir(paths.output, { recursive: true });
}

export async function writeJobSpec(paths: JobPaths, spec: JobSpec): Promise<void> {
  // Written whole then renamed, so that a trainer never reads half a spec.
  const temporary = `${paths.spec}.tmp`;
  await fs.writeFile(temporary, `${JSON.stringify(spec, null, 2)}\n`);
  await fs.rename(temporary, paths.spec);
}

/** Removes the spec and inputs; the output directory stays. */
export async function removeJobFiles(paths: JobPaths): Promise<void> {
  await fs.rm(paths.dir, { recursive: true, force: true });
}

/** Removes an attempt's output directory, and its model's directory if that is left empty. */
export async function removeOutput(paths: JobPaths): Promise<void> {
  await fs.rm(paths.output, { recursive: true, force: true });
  await fs.rmdir(path.dirname(paths.output)).catch(() => undefined);
}

// ---------------------------------------------------------------------------------------------------------
// Job directories of workers that are gone (docs/worker-runtime.md#job-directories)

/**
 * A worker killed before it could remove its job directories leaves them behind; the workers of the work
 * dir (several may share it) remove them. Each job directory holds its owner's record, `owner.json`: the
 * process that made it, and where. The owner keeps the record's modification time fresh while the job runs.
 * A directory is stale when its owner is known to be gone: it ran on this machine and in this PID namespace,
 * and no process with its PID and start time is left; or, for an owner elsewhere (another machine sharing
 * the work dir, or another container, such as this worker's previous one), its record went
 * JOB_DIR_STALE_MS without a refresh. That is timed on the sweeping worker's own clock (JobDirWatch), never
 * by comparing it with the owner's, which sets the record's time: two machines' clocks may disagree.
 */
const OWNER_FILE = 'owner.json';
/** How often a running job's owner record is refreshed. */
export const JOB_DIR_REFRESH_MS = 60_000;
/** How long the record of an owner elsewhere may go without a refresh before its directory is stale. */
export const JOB_DIR_STALE_MS = 10 * 60_000;

interface JobDirOwner {
  /** The host name and, on Linux, the PID namespace: where `pid` names a process. */
  host: string;
  pid: number;
  /** The process's start time in clock ticks since boot (Linux; null elsewhere): a later process given the same PID has another. */
  started: string | null;
}

let thisProcess: Promise<JobDirOwner> | undefined;

function currentOwner(): Promise<JobDirOwner> {
  thisProcess ??= (async () => {
    const namespace = await fs.readlink('/proc/self/ns/pid').catch(() => '');
    return { host: `${os.hostname()} ${namespace}`.trim(), pid: process.pid, started: await processStart(process.pid) };
  })();
  return thisProcess;
}

/** A process's start time from /proc; null when it has none (no such process, or no /proc). */
async function processStart(pid: number): Promise<string | null> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // Field 22. Field 2, the command name, is in parentheses and may hold spaces and parentheses itself.
  return stat === undefined ? null : (stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null);
}

/** Marks the job directory as still in use (its owner record's modification time). */
export async function refreshJobDir(paths: JobPaths): Promise<void> {
  const now = new Date();
  await fs.utimes(path.join(paths.dir, OWNER_FILE), now, now);
}

/**
 * What one worker's sweeps have seen of the records of owners elsewhere: each record's modification time,
 * and when, on this worker's clock, it was first seen at that time. A record is stale once it has kept its
 * time for JOB_DIR_STALE_MS of this clock, so a fresh worker removes nothing of an owner elsewhere before it
 * has watched that long.
 */
export class JobDirWatch {
  readonly seen = new Map<string, { mtimeMs: number; since: number }>();
  constructor(readonly now: () => number = Date.now) {}

  /** Whether the record, last modified at `mtimeMs`, has kept that time for JOB_DIR_STALE_MS. */
  unrefreshed(file: string, mtimeMs: number): boolean {
    const last = this.seen.get(file);
    if (last?.mtimeMs !== mtimeMs) {
      this.seen.set(file, { mtimeMs, since: this.now() });
      return false;
    }
    return this.now() - last.since > JOB_DIR_STALE_MS;
  }
}

/**
 * Removes the job directories under `workDir` whose owner is gone; answers their names. A directory without
 * a readable owner record is kept: its owner may be about to write it, or be a worker from before records.
 */
export async function removeStaleJobDirs(workDir: string, watch: JobDirWatch): Promise<string[]> {
  const root = path.join(workDir, 'jobs');
  const entries = await fs.readdir(root, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  const self = await currentOwner();
  const removed: string[] = [];
  const present = new Set<string>();
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const dir = path.join(root, entry.name);
    const file = path.join(dir, OWNER_FILE);
    present.add(file);
    if (!(await isStale(file, self, watch))) continue;
    await fs.rm(dir, { recursive: true, force: true });
    removed.push(entry.name);
  }
  for (const file of watch.seen.keys()) if (!present.has(file)) watch.seen.delete(file);
  return removed;
}

async function isStale(file: string, self: JobDirOwner, watch: JobDirWatch): Promise<boolean> {
  let recorded: Partial<JobDirOwner>;
  let refreshed: number;
  try {
    recorded = JSON.parse(await fs.readFile(file, 'utf8'));
    refreshed = (await fs.stat(file)).mtimeMs;
  } catch {
    return false;
  }
  if (typeof recorded?.pid !== 'number') return false;
  if (recorded.host !== self.host) return watch.unrefreshed(file, refreshed);
  try {
    process.kill(recorded.pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
  // The PID is taken; on Linux, by the owner only if the start time is its own (/proc may hide other users').
  const started = self.started === null ? null : await processStart(recorded.pid);
  return started !== null && started !== recorded.started;
}
