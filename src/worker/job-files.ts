import fs from 'node:fs/promises';
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
    target_step: job.target_step,
    config: job.config,
    inputs_path: paths.inputs,
    num_inputs: job.num_inputs,
    output_dir: paths.output,
    worker_id: workerId,
  };
}

/** Creates the job directory and an empty output directory (left over from a failed attempt: cleared). */
export async function prepareJobDirs(paths: JobPaths): Promise<void> {
  await fs.rm(paths.dir, { recursive: true, force: true });
  await fs.mkdir(paths.dir, { recursive: true });
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
