import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { ClaimedJob } from '../../src/training/schemas.js';
import type { WorkerClient } from '../../src/worker/client.js';
import { buildJobSpec, jobPaths, prepareJobDirs, removeJobFiles, writeJobSpec } from '../../src/worker/job-files.js';
import { JobRun } from '../../src/worker/job-run.js';

function claimedJob(overrides: Partial<ClaimedJob> = {}): ClaimedJob {
  return {
    id: '0b8f2a52-4d4e-4a51-9d7c-3f1f3c0a1b01',
    kind: 'rl',
    attempt: 2,
    model: { id: '7d1e0c7a-95b1-4a3e-8f7e-2c1f0d9b8a02', entity: 'team', project: 'proj', name: '../../etc', base_model: 'Qwen/Qwen2.5-7B' },
    base_checkpoint: { id: 'c3d0e2a1-1111-4a3e-8f7e-2c1f0d9b8a03', step: 4, uri: '/adapters/m/step-4' },
    target_step: 5,
    config: { experimental_config: { learning_rate: 1e-5 } },
    num_inputs: 3,
    inputs_url: '/v1/workers/jobs/x/inputs',
    ...overrides,
  };
}

function roots() {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-files-'));
  return { workDir: path.join(base, 'work'), outputDir: path.join(base, 'out') };
}

describe('job files', () => {
  it('puts each attempt in its own job directory and the output under the model id and step', () => {
    const r = roots();
    const job = claimedJob();
    const paths = jobPaths(r, job);
    expect(paths.dir).toBe(path.join(r.workDir, 'jobs', `${job.id}-attempt-2`));
    expect(paths.spec).toBe(path.join(paths.dir, 'spec.json'));
    expect(paths.inputs).toBe(path.join(paths.dir, 'inputs.jsonl'));
    // The model's name ("../../etc") plays no part in any path.
    expect(paths.output).toBe(path.join(r.outputDir, job.model.id, 'step-5'));
  });

  it('writes a spec with every field the command contract names', async () => {
    const r = roots();
    const job = claimedJob();
    const paths = jobPaths(r, job);
    await prepareJobDirs(paths);
    await writeJobSpec(paths, buildJobSpec(job, paths, 'gpu-1'));
    expect(JSON.parse(fs.readFileSync(paths.spec, 'utf8'))).toEqual({
      spec_version: 1,
      job: { id: job.id, kind: 'rl', attempt: 2 },
      model: job.model,
      base_checkpoint: job.base_checkpoint,
      base_checkpoint_uri: '/adapters/m/step-4',
      target_step: 5,
      config: { experimental_config: { learning_rate: 1e-5 } },
      inputs_path: paths.inputs,
      num_inputs: 3,
      output_dir: paths.output,
      worker_id: 'gpu-1',
    });
    expect(fs.readdirSync(paths.dir).sort()).toEqual(['owner.json', 'spec.json']);
  });

  it('passes on the KL reference checkpoint the server resolved, null included, and nothing from a server that sends none', () => {
    const reference = { id: 'c3d0e2a1-2222-4a3e-8f7e-2c1f0d9b8a04', step: 2, uri: '/adapters/imported/c3d0e2a1' };
    const paths = jobPaths(roots(), claimedJob());
    expect(buildJobSpec(claimedJob({ kl_reference_checkpoint: reference }), paths, 'w').kl_reference_checkpoint).toEqual(reference);
    expect(buildJobSpec(claimedJob({ kl_reference_checkpoint: null }), paths, 'w')).toHaveProperty('kl_reference_checkpoint', null);
    expect(buildJobSpec(claimedJob(), paths, 'w')).not.toHaveProperty('kl_reference_checkpoint');
  });

  it('keeps the directories of the checkpoints a job reads, its KL reference included, from the release sweep', () => {
    const r = roots();
    const modelId = '7d1e0c7a-95b1-4a3e-8f7e-2c1f0d9b8a02';
    const job = claimedJob({
      base_checkpoint: { id: 'c3d0e2a1-1111-4a3e-8f7e-2c1f0d9b8a03', step: 4, uri: path.join(r.outputDir, modelId, 'step-4') },
      kl_reference_checkpoint: { id: 'c3d0e2a1-2222-4a3e-8f7e-2c1f0d9b8a04', step: 2, uri: `file://${path.join(r.outputDir, modelId, 'step-2')}` },
    });
    const settings = { ...r, command: ['true'], workerId: 'w', cancelGraceMs: 0, heartbeatMs: undefined, eventWindowMs: 0, trainerEnv: {}, resident: false };
    const claimed = { answer: { job, lease: { token: crypto.randomUUID(), expires_at: new Date().toISOString() } }, leaseEndsAt: performance.now() };
    const run = new JobRun(claimed, {} as WorkerClient, settings, pino({ level: 'silent' }));
    expect(run.checkpointDirectories).toEqual(['step-5', 'step-4', 'step-2'].map((step) => path.join(r.outputDir, modelId, step)));
  });

  it('gives a job on the base model a null base checkpoint uri', () => {
    const job = claimedJob({ base_checkpoint: null });
    const paths = jobPaths(roots(), job);
    expect(buildJobSpec(job, paths, 'w').base_checkpoint_uri).toBeNull();
  });

  it('starts with an empty output directory and removes the job directory but not the output afterwards', async () => {
    const paths = jobPaths(roots(), claimedJob());
    fs.mkdirSync(paths.output, { recursive: true });
    fs.writeFileSync(path.join(paths.output, 'partial.bin'), 'left by a crashed attempt');
    await prepareJobDirs(paths);
    expect(fs.readdirSync(paths.output)).toEqual([]);
    fs.writeFileSync(paths.inputs, '{}\n');
    fs.writeFileSync(path.join(paths.output, 'adapter_model.safetensors'), 'weights');
    await removeJobFiles(paths);
    expect(fs.existsSync(paths.dir)).toBe(false);
    expect(fs.readdirSync(paths.output)).toEqual(['adapter_model.safetensors']);
  });
});
