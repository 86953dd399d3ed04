import fs from 'node:fs';
import path from 'node:path';

/**
 * PGlite has no lock on its data directory: two processes that open one lose each other's writes.
 * A pid file taken with O_EXCL keeps the second process out; a file left by a dead process is taken over.
 */
export class DataDirLockedError extends Error {
  constructor(readonly dataDir: string, readonly pid: number) {
    super(
      `The data directory ${dataDir} is in use by another trainyard process (pid ${pid}). ` +
        'Stop that process, point DATA_DIR at another directory, or set DATABASE_URL to share a PostgreSQL server.',
    );
    this.name = 'DataDirLockedError';
  }
}

export interface DataDirLock {
  readonly path: string;
  release(): void;
}

export function lockFilePath(dataDir: string): string {
  return path.join(dataDir, 'trainyard.lock');
}

/** The pid holding the data directory, or undefined when no live process holds it. */
export function lockHolder(dataDir: string): number | undefined {
  let pid: number;
  try {
    pid = Number.parseInt(fs.readFileSync(lockFilePath(dataDir), 'utf8'), 10);
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  // In a container the restarted server often gets the pid its predecessor had.
  if (pid === process.pid) return undefined;
  try {
    process.kill(pid, 0);
    return pid;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM' ? pid : undefined;
  }
}

export function acquireDataDirLock(dataDir: string): DataDirLock {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = lockFilePath(dataDir);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = fs.openSync(file, 'wx', 0o600);
      fs.writeSync(fd, String(process.pid));
      fs.closeSync(fd);
      let released = false;
      return {
        path: file,
        release() {
          if (released) return;
          released = true;
          try {
            if (fs.readFileSync(file, 'utf8') === String(process.pid)) fs.unlinkSync(file);
          } catch {
            // Already gone: nothing to release.
          }
        },
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = lockHolder(dataDir);
      if (holder !== undefined) throw new DataDirLockedError(dataDir, holder);
      fs.rmSync(file, { force: true }); // stale: its process is gone
    }
  }
  throw new Error(`Could not take the lock file ${file}`);
}
