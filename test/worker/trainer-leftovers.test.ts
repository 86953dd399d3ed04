import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TrainerProcess } from '../../src/worker/trainer-process.js';
import { isAlive, waitFor } from './harness.js';

/**
 * A trainer that starts a helper process (a dataloader worker, an inference engine) in its process group and
 * then exits on its own, crashing, without stopping it: the helper must not outlive it (it would hold the
 * GPU's memory).
 */
function trainerWithHelper(helper: string, groupGraceMs: number) {
  const stdout: string[] = [];
  const trainer = new TrainerProcess({
    command: [
      process.execPath,
      '-e',
      `const helper = require('node:child_process').spawn(process.execPath, ['-e', ${JSON.stringify(helper)}], { stdio: 'ignore' });
       console.log(helper.pid);
       setTimeout(() => process.exit(1), 200);`,
    ],
    specPath: '/dev/null',
    env: { PATH: process.env.PATH },
    groupGraceMs,
    onStdoutLine: (line) => stdout.push(line),
    onStderrLine: () => {},
    onLongLine: () => {},
  });
  return { trainer, helperPid: () => Number(stdout[0]) };
}

/** Alive and not a zombie waiting to be reaped by whoever inherited it. */
function isRunning(pid: number): boolean {
  if (!fs.existsSync('/proc/self/stat')) return isAlive(pid);
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

describe('what a trainer that exited on its own left in its process group', () => {
  it('is stopped with SIGTERM before the exit is reported', async () => {
    const { trainer, helperPid } = trainerWithHelper('setInterval(() => {}, 1 << 30)', 5_000);
    expect(await trainer.exited).toEqual({ code: 1, signal: null });
    expect(helperPid()).toBeGreaterThan(0);
    expect(isRunning(helperPid())).toBe(false);
  });

  it('is killed once the grace period is over when it ignores SIGTERM', async () => {
    const { trainer, helperPid } = trainerWithHelper("process.on('SIGTERM', () => {}); setInterval(() => {}, 1 << 30)", 1000);
    const started = Date.now();
    expect(await trainer.exited).toEqual({ code: 1, signal: null });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    // SIGKILL was sent; the kernel ends the process as soon as it runs.
    await waitFor(() => !isRunning(helperPid()), 1000);
  });
});
