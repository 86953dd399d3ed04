import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { JOB_DIR_STALE_MS, JobDirWatch, jobPaths, prepareJobDirs, removeStaleJobDirs } from '../../src/worker/job-files.js';
import { Worker } from '../../src/worker/worker.js';
import { TRAINER_COMMAND, waitFor } from './harness.js';

/**
 * Job directories (spec and inputs) of a worker killed before it could remove them are removed by the next
 * worker to start on the work dir, and by the others sharing it; those of live workers never are.
 */

const job = (n: number) => ({
  id: `00000000-0000-4000-8000-00000000000${n}`,
  attempt: 1,
  model: { id: '7d1e0c7a-95b1-4a3e-8f7e-2c1f0d9b8a02', entity: 'e', project: 'p', name: 'm', base_model: 'b' },
  target_step: 1,
});

/** A work dir with one job directory made by this process, and `owned` to make others with another owner. */
async function workDir() {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-stale-'));
  const roots = { workDir: path.join(base, 'work'), outputDir: path.join(base, 'adapters') };
  const ours = jobPaths(roots, job(0));
  await prepareJobDirs(ours);
  const record = JSON.parse(fs.readFileSync(path.join(ours.dir, 'owner.json'), 'utf8'));
  /**
   * Job directory `n`, whose owner record is this process's with `changes`, last refreshed `ageMs` ago; or
   * without an owner record (`changes` undefined).
   */
  const owned = async (n: number, changes: Record<string, unknown> | undefined, ageMs = 0) => {
    const paths = jobPaths(roots, job(n));
    await prepareJobDirs(paths);
    const file = path.join(paths.dir, 'owner.json');
    if (!changes) {
      fs.rmSync(file);
    } else {
      fs.writeFileSync(file, JSON.stringify({ ...record, ...changes }));
      const refreshed = new Date(Date.now() - ageMs);
      fs.utimesSync(file, refreshed, refreshed);
    }
    return path.basename(paths.dir);
  };
  return { roots, ours: path.basename(ours.dir), owned, list: () => fs.readdirSync(path.join(roots.workDir, 'jobs')).sort() };
}

/** The PID of a process that has exited. */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid!;
}

describe('job directories left in the work dir', () => {
  it('are removed when their owner on this machine is gone, and kept without an owner record', async () => {
    const dir = await workDir();
    const dead = await dir.owned(1, { pid: deadPid() });
    const ownerless = await dir.owned(2, undefined);
    expect(await removeStaleJobDirs(dir.roots.workDir, new JobDirWatch())).toEqual([dead]);
    expect(dir.list()).toEqual([dir.ours, ownerless].sort());
  });

  it.skipIf(!fs.existsSync('/proc/self/stat'))('are removed when their owner\'s PID now names a later process', async () => {
    const dir = await workDir();
    // This process's PID, with another start time: a worker that was gone before this process started.
    const reused = await dir.owned(1, { started: '1' });
    expect(await removeStaleJobDirs(dir.roots.workDir, new JobDirWatch())).toEqual([reused]);
    expect(dir.list()).toEqual([dir.ours]);
  });

  it('of an owner elsewhere are removed once their record has gone unrefreshed for JOB_DIR_STALE_MS of this worker\'s clock', async () => {
    const dir = await workDir();
    let now = Date.now();
    const watch = new JobDirWatch(() => now);
    // The other machine's clock is an hour behind: its records look an hour old from the first look.
    const live = await dir.owned(1, { host: 'another-machine', pid: process.pid }, 60 * 60_000);
    const dead = await dir.owned(2, { host: 'another-machine', pid: process.pid }, 60 * 60_000);
    expect(await removeStaleJobDirs(dir.roots.workDir, watch)).toEqual([]);
    // Its owner refreshes one record (by its own clock); the other keeps its time.
    now += JOB_DIR_STALE_MS - 60_000;
    const refreshed = new Date(Date.now() - 59 * 60_000);
    fs.utimesSync(path.join(dir.roots.workDir, 'jobs', live, 'owner.json'), refreshed, refreshed);
    expect(await removeStaleJobDirs(dir.roots.workDir, watch)).toEqual([]);
    now += 2 * 60_000;
    expect(await removeStaleJobDirs(dir.roots.workDir, watch)).toEqual([dead]);
    expect(dir.list()).toEqual([dir.ours, live].sort());
  });

  it('are removed by a worker as it starts', async () => {
    const dir = await workDir();
    const dead = await dir.owned(1, { pid: deadPid() });
    // No server answers: the worker keeps retrying its claim until it is drained.
    const worker = new Worker(
      {
        serverUrl: 'http://127.0.0.1:9',
        key: 'ty_test',
        command: TRAINER_COMMAND,
        kinds: undefined,
        baseModels: undefined,
        concurrency: 1,
        workDir: dir.roots.workDir,
        outputDir: dir.roots.outputDir,
        releaseMs: 0,
        workerId: 'stale-test',
        cancelGraceMs: 1_000,
        drainMs: 1_000,
        heartbeatMs: undefined,
        eventWindowMs: 50,
        pollSeconds: 1,
        trainerEnv: { PATH: process.env.PATH },
        resident: false,
      },
      pino({ level: 'silent' }),
    );
    const done = worker.run();
    try {
      await waitFor(() => !dir.list().includes(dead));
      expect(dir.list()).toEqual([dir.ours]);
    } finally {
      worker.drain();
      await done;
    }
  });
});
