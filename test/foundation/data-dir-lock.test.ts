import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { acquireDataDirLock, lockFilePath, lockHolder } from '../../src/db/lock.js';
import type { ChildCommand, ChildReply } from '../helpers/data-dir-lock-child.js';

/**
 * The embedded database's data directory lock (src/db/lock.ts) against other processes: starters racing over
 * a lock file left by a crash, a holder killed with SIGKILL, a pid reused by an unrelated process.
 */

const onLinux = process.platform === 'linux';
const netns = onLinux ? fs.readlinkSync('/proc/self/ns/net') : undefined;
/** Above Linux's largest pid_max: no process has it. */
const DEAD_PID = 2147483646;

const tempDirs: string[] = [];
const processes: ChildProcess[] = [];
afterAll(() => {
  for (const child of processes) child.kill('SIGKILL');
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-lock-'));
  tempDirs.push(dir);
  return dir;
}

interface LockChild {
  process: ChildProcess;
  exited: Promise<void>;
  request(command: ChildCommand): Promise<ChildReply>;
}

/** A process that takes `dataDir`'s lock when asked (test/helpers/data-dir-lock-child.ts). */
async function startChild(dataDir: string): Promise<LockChild> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/data-dir-lock-child.ts', dataDir], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  processes.push(child);
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const replies: ChildReply[] = [];
  let waiting: ((reply: ChildReply) => void) | undefined;
  child.on('message', (reply: ChildReply) => {
    if (waiting) {
      const resolve = waiting;
      waiting = undefined;
      resolve(reply);
    } else replies.push(reply);
  });
  const next = () => (replies.length ? Promise.resolve(replies.shift()!) : new Promise<ChildReply>((resolve) => (waiting = resolve)));
  expect(await Promise.race([next(), exited.then(() => 'exited')])).toEqual({ ready: true });
  return {
    process: child,
    exited,
    request(command) {
      child.send(command);
      return next();
    },
  };
}

/** A live process that is not trainyard. */
function unrelatedProcess(): number {
  const sleeper = spawn('sleep', ['30'], { stdio: 'ignore' });
  processes.push(sleeper);
  return sleeper.pid!;
}

function expectedRefusal(dataDir: string, pid: number): string {
  return (
    `The data directory ${dataDir} is in use by another trainyard process (pid ${pid}; lock file ${path.join(dataDir, 'trainyard.lock')}). ` +
    'Stop that process, point DATA_DIR at another directory, or set DATABASE_URL to share a PostgreSQL server. ' +
    'If no trainyard process uses it (the pid now belongs to something else), delete the lock file.'
  );
}

describe('starters racing over a stale lock file', () => {
  const STARTERS = 6;
  const ROUNDS = 8;
  let dataDir: string;
  let children: LockChild[];
  beforeAll(async () => {
    dataDir = tempDir();
    children = await Promise.all(Array.from({ length: STARTERS }, () => startChild(dataDir)));
  }, 60_000);

  async function race(staleContent: string): Promise<void> {
    for (let round = 0; round < ROUNDS; round++) {
      fs.writeFileSync(lockFilePath(dataDir), staleContent);
      const go = Date.now() + 200;
      const replies = await Promise.all(children.map((child) => child.request({ go })));
      try {
        const refusals = replies.filter((reply) => !('acquired' in reply && reply.acquired)).map((reply) => ('error' in reply ? reply.error : reply));
        expect(refusals).toEqual(Array(STARTERS - 1).fill('DataDirLockedError'));
      } finally {
        await Promise.all(children.map((child) => child.request({ release: true })));
      }
    }
  }

  // Without the socket (off Linux) two starters that both find a dead holder's file can both take it, as with any pid file.
  it.skipIf(!onLinux)('lets exactly one of six take a file naming a dead process', async () => {
    await race(String(DEAD_PID));
  });

  it.skipIf(!onLinux)('lets exactly one of six take an empty file', async () => {
    await race('');
  });
});

describe('a lock file left behind', () => {
  const locks: { release(): void }[] = [];
  afterEach(() => {
    for (const lock of locks.splice(0)) lock.release();
  });

  it.skipIf(!onLinux)('is taken over when its pid now belongs to an unrelated process of this network namespace', async () => {
    const dataDir = tempDir();
    fs.writeFileSync(lockFilePath(dataDir), `${unrelatedProcess()} ${netns}`);
    locks.push(await acquireDataDirLock(dataDir));
    expect(fs.readFileSync(lockFilePath(dataDir), 'utf8')).toBe(`${process.pid} ${netns}`);
  });

  it.skipIf(!onLinux)('is taken over when it is empty, and then names this process', async () => {
    const dataDir = tempDir();
    fs.writeFileSync(lockFilePath(dataDir), '');
    locks.push(await acquireDataDirLock(dataDir));
    expect(fs.readFileSync(lockFilePath(dataDir), 'utf8')).toBe(`${process.pid} ${netns}`);
  });
});

describe('a data directory held by another process', () => {
  it('refuses this process, naming the holder and the lock file, until the holder is killed', async () => {
    const dataDir = tempDir();
    const holder = await startChild(dataDir);
    expect(await holder.request({ go: 0 })).toEqual({ acquired: true });
    await expect(acquireDataDirLock(dataDir)).rejects.toThrow(expectedRefusal(dataDir, holder.process.pid!));

    holder.process.kill('SIGKILL');
    await holder.exited;
    const lock = await acquireDataDirLock(dataDir);
    lock.release();
  });

  it('is reported by lockHolder while held, and not once the holder is killed, even when its pid is reused', async () => {
    const dataDir = tempDir();
    const holder = await startChild(dataDir);
    expect(await holder.request({ go: 0 })).toEqual({ acquired: true });
    expect(await lockHolder(dataDir)).toEqual({ pid: holder.process.pid });

    holder.process.kill('SIGKILL');
    await holder.exited;
    expect(await lockHolder(dataDir)).toBeUndefined();
    if (!onLinux) return;
    // After a reboot the file's pid may name an unrelated process: with no socket held in this namespace, nobody holds it.
    fs.writeFileSync(lockFilePath(dataDir), `${unrelatedProcess()} ${netns}`);
    expect(await lockHolder(dataDir)).toBeUndefined();
  });
});

describe('a file system without hard links', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('gets the lock file created in place instead, and released', async () => {
    const dataDir = tempDir();
    vi.spyOn(fs, 'linkSync').mockImplementation(() => {
      throw Object.assign(new Error('EPERM: operation not permitted, link'), { code: 'EPERM' });
    });
    const lock = await acquireDataDirLock(dataDir);
    expect(fs.readFileSync(lockFilePath(dataDir), 'utf8')).toBe(onLinux ? `${process.pid} ${netns}` : String(process.pid));
    expect(fs.readdirSync(dataDir)).toEqual(['trainyard.lock']);
    lock.release();
    expect(fs.readdirSync(dataDir)).toEqual([]);
  });
});
