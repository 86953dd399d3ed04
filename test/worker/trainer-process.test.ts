import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { TrainerProcess } from '../../src/worker/trainer-process.js';

const FIXTURE = path.resolve('test/fixtures/trainer.mjs');

/** A spec for the fixture trainer in a fresh directory, with `experimental_config` options. */
function fixtureSpec(options: Record<string, unknown> = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-proc-'));
  const spec = {
    spec_version: 1,
    job: { id: 'job-1', kind: 'rl', attempt: 1 },
    model: { id: 'model-1', entity: 'e', project: 'p', name: 'm', base_model: 'base' },
    target_step: 1,
    config: { experimental_config: options },
    inputs_path: path.join(dir, 'inputs.jsonl'),
    output_dir: path.join(dir, 'out'),
  };
  fs.mkdirSync(spec.output_dir);
  fs.writeFileSync(spec.inputs_path, '{"trajectories":[]}\n{"trajectories":[]}\n');
  fs.writeFileSync(path.join(dir, 'spec.json'), JSON.stringify(spec));
  return { specPath: path.join(dir, 'spec.json'), spec };
}

function start(specPath: string, env: Record<string, string> = {}) {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const trainer = new TrainerProcess({
    command: [process.execPath, FIXTURE],
    specPath,
    env: { PATH: process.env.PATH, ...env },
    groupGraceMs: 1000,
    onStdoutLine: (line) => stdout.push(line),
    onStderrLine: (line) => stderr.push(line),
    onLongLine: () => {},
  });
  return { trainer, stdout, stderr };
}

describe('TrainerProcess', () => {
  it('passes the spec path as the last argument and in TRAINYARD_JOB_SPEC, and delivers stdout line by line', async () => {
    const { specPath, spec } = fixtureSpec();
    const log = path.join(path.dirname(specPath), 'runs.log');
    const { trainer, stdout } = start(specPath, { TRAINER_FIXTURE_LOG: log });
    expect(await trainer.exited).toEqual({ code: 0, signal: null });
    expect(fs.readFileSync(log, 'utf8')).toMatch(/^job-1 1 \d+ true\n$/);
    const events = stdout.filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
    expect(events.map((e) => e.type)).toEqual(['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'checkpoint']);
    expect(events[0].data).toEqual({ num_sequences: 2 });
    expect(events[4].uri).toBe(spec.output_dir);
    expect(fs.readdirSync(spec.output_dir).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
  });

  it('keeps the tail of stderr and reports the exit code', async () => {
    const { specPath } = fixtureSpec({ fixture_mode: 'crash' });
    const { trainer, stderr } = start(specPath);
    expect(await trainer.exited).toEqual({ code: 1, signal: null });
    expect(stderr.at(-1)).toContain('CUDA out of memory');
    expect(trainer.stderrTail()).toContain('Traceback (most recent call last):');
    expect(trainer.stderrTail(20)).toBe('ory (fixture crash)\n');
  });

  it('stops a trainer that honours SIGTERM without waiting for the grace period', async () => {
    const { specPath } = fixtureSpec({ fixture_mode: 'hang' });
    const { trainer, stdout } = start(specPath);
    await until(() => stdout.some((line) => line.includes('training_started')));
    const exit = await trainer.terminate(60_000);
    expect(exit).toEqual({ code: 143, signal: null });
  });

  it('kills a trainer that ignores SIGTERM once the grace period is over', async () => {
    const { specPath } = fixtureSpec({ fixture_mode: 'stubborn' });
    const { trainer, stdout, stderr } = start(specPath);
    await until(() => stdout.some((line) => line.includes('training_started')));
    const exit = await trainer.terminate(300);
    expect(exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(stderr).toContain('fixture trainer: ignoring SIGTERM');
  });

  it('reports a command that cannot be started', async () => {
    const trainer = new TrainerProcess({
      command: ['/nonexistent/trainer'],
      specPath: '/tmp/spec.json',
      env: {},
      groupGraceMs: 1000,
      onStdoutLine: () => {},
      onStderrLine: () => {},
      onLongLine: () => {},
    });
    const exit = await trainer.exited;
    expect(exit.code).toBeNull();
    expect(exit.spawnError?.message).toContain('ENOENT');
  });
});

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
