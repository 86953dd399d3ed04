import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/**
 * PGlite has no lock on its data directory: two processes that open one lose each other's writes.
 *
 * On Linux the lock is an abstract Unix socket named after the directory's device and inode: binding it is
 * atomic, fails with EADDRINUSE while another process holds it, and the kernel frees it however the holder
 * dies. Abstract sockets are per network namespace, so a pid file, `trainyard.lock`, also names the holder and
 * its namespace, for the error message and for processes of other namespaces, which can only test whether the
 * pid is alive in their own pid namespace (unreliable across containers: sharing DATA_DIR between them is unsupported).
 * The file is written to a temporary name and linked into place, so it is never seen empty. Elsewhere the
 * file alone is the lock, as before: a file whose process is dead is taken over.
 */
export class DataDirLockedError extends Error {
  constructor(readonly dataDir: string, readonly pid: number | undefined) {
    super(
      `The data directory ${dataDir} is in use by another trainyard process (${pid === undefined ? '' : `pid ${pid}; `}lock file ${lockFilePath(dataDir)}). ` +
        'Stop that process, point DATA_DIR at another directory, or set DATABASE_URL to share a PostgreSQL server. ' +
        'If no trainyard process uses it (the pid now belongs to something else), delete the lock file.',
    );
    this.name = 'DataDirLockedError';
  }
}

export interface DataDirLock {
  readonly path: string;
  release(): void;
}

export interface LockHolder {
  /** Undefined when the lock file cannot be read (the holder is still writing it, or it was deleted). */
  pid: number | undefined;
}

/** Without the socket, an unparseable file younger than this may be a starter's (an older trainyard's) not yet written. */
const UNPARSEABLE_GRACE_MS = 10_000;

export function lockFilePath(dataDir: string): string {
  return path.join(dataDir, 'trainyard.lock');
}

/** Whether a process holds the data directory, and its pid. */
export async function lockHolder(dataDir: string): Promise<LockHolder | undefined> {
  const file = lockFilePath(dataDir);
  const netns = ownNetns();
  let name: string | undefined;
  try {
    name = netns === undefined ? undefined : socketName(dataDir);
  } catch {
    return undefined; // no data directory
  }
  if (name !== undefined && (await socketAnswers(name))) return { pid: readLockFile(file)?.pid };
  const existing = readLockFile(file);
  if (!existing) return undefined;
  const holder = fileHolder(existing, netns, name !== undefined);
  return holder === 'stale' ? undefined : holder;
}

export async function acquireDataDirLock(dataDir: string): Promise<DataDirLock> {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = lockFilePath(dataDir);
  const netns = ownNetns();
  const socket = netns === undefined ? undefined : await bindSocket(socketName(dataDir));
  if (socket === 'in use') throw new DataDirLockedError(dataDir, readLockFile(file)?.pid);
  // The namespace goes in the file only with the socket held: it tells a reader in this namespace to trust the socket.
  const line = socket ? `${process.pid} ${netns}` : String(process.pid);
  try {
    takeLockFile(dataDir, line, socket ? netns : undefined);
  } catch (error) {
    socket?.close();
    throw error;
  }
  let released = false;
  return {
    path: file,
    release() {
      if (released) return;
      released = true;
      try {
        // Before closing the socket: while it is held, no one in this namespace can have replaced the file since the read.
        if (fs.readFileSync(file, 'utf8') === line) fs.unlinkSync(file);
      } catch {
        // Already gone: nothing to remove.
      }
      socket?.close();
    },
  };
}

interface LockFile {
  pid: number | undefined;
  netns: string | undefined;
  mtimeMs: number;
}

/** The file's holder; undefined when there is no file. Older trainyards wrote the pid alone. */
function readLockFile(file: string): LockFile | undefined {
  let text: string;
  let mtimeMs: number;
  try {
    const fd = fs.openSync(file, 'r');
    try {
      text = fs.readFileSync(fd, 'utf8');
      mtimeMs = fs.fstatSync(fd).mtimeMs;
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return undefined;
  }
  const [first, netns] = text.trim().split(/\s+/);
  const pid = Number.parseInt(first, 10);
  return { pid: Number.isInteger(pid) && pid > 0 ? pid : undefined, netns, mtimeMs };
}

/**
 * Who an existing lock file says holds the directory. `socketFree`: no process of this namespace holds the
 * socket (this one holds it, or nobody answered), so a file written from this namespace is stale whatever
 * its pid: after a crash or reboot the pid may belong to an unrelated process.
 */
function fileHolder(existing: LockFile, netns: string | undefined, socketFree: boolean): LockHolder | 'stale' {
  if (socketFree && (existing.pid === undefined || (netns !== undefined && existing.netns === netns))) return 'stale';
  if (existing.pid === undefined) return Date.now() - existing.mtimeMs > UNPARSEABLE_GRACE_MS ? 'stale' : { pid: undefined };
  return isAlive(existing.pid) ? { pid: existing.pid } : 'stale';
}

function isAlive(pid: number): boolean {
  // In a container the restarted server often gets the pid its predecessor had.
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Puts `line` in the lock file unless a live holder's file is there. With the socket held (`netns` set) the
 * takeover is serialised among the processes of this namespace; without it two starters that both find a
 * dead holder's file can still both take it, as with any pid file.
 */
function takeLockFile(dataDir: string, line: string, netns: string | undefined): void {
  const file = lockFilePath(dataDir);
  for (let attempt = 0; attempt < 3; attempt++) {
    const temp = writeTemp(dataDir, line);
    try {
      linkOrCreate(temp, file, line);
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    } finally {
      fs.rmSync(temp, { force: true });
    }
    const existing = readLockFile(file);
    if (!existing) continue; // released meanwhile: link again
    const holder = fileHolder(existing, netns, netns !== undefined);
    if (holder !== 'stale') throw new DataDirLockedError(dataDir, holder.pid);
    fs.renameSync(writeTemp(dataDir, line), file); // replaces it in one step: the file is never missing or empty
    return;
  }
  throw new Error(`Could not take the lock file ${file}`);
}

/**
 * Puts the written temporary file in place as `file`, or fails with EEXIST. A file system without hard links
 * (vfat, some network and FUSE mounts) gets `file` created exclusively and then written instead, briefly empty:
 * a reader without the socket gives an unreadable file UNPARSEABLE_GRACE_MS before taking it over.
 */
function linkOrCreate(temp: string, file: string, line: string): void {
  try {
    fs.linkSync(temp, file);
  } catch (error) {
    if (!['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS'].includes((error as NodeJS.ErrnoException).code ?? '')) throw error;
    fs.writeFileSync(file, line, { flag: 'wx', mode: 0o600 });
  }
}

function writeTemp(dataDir: string, line: string): string {
  const temp = path.join(dataDir, `trainyard.lock.${process.pid}.${crypto.randomBytes(6).toString('hex')}.tmp`);
  fs.writeFileSync(temp, line, { flag: 'wx', mode: 0o600 });
  return temp;
}

/** This process's network namespace, e.g. `net:[4026531840]`; undefined off Linux. */
function ownNetns(): string | undefined {
  try {
    return fs.readlinkSync('/proc/self/ns/net');
  } catch {
    return undefined;
  }
}

function socketName(dataDir: string): string {
  const { dev, ino } = fs.statSync(dataDir, { bigint: true });
  return `\0trainyard-datadir-${crypto.createHash('sha256').update(`${dev}:${ino}`).digest('hex').slice(0, 32)}`;
}

/** The bound socket; 'in use' when another process holds it; undefined when this system has no abstract sockets. */
function bindSocket(name: string): Promise<net.Server | 'in use' | undefined> {
  return new Promise((resolve) => {
    // It is a lock, not a service: connections are closed at once (lockHolder only checks that one is accepted).
    const server = net.createServer((connection) => connection.destroy());
    server.on('error', (error: NodeJS.ErrnoException) => resolve(error.code === 'EADDRINUSE' ? 'in use' : undefined));
    server.listen({ path: name, exclusive: true }, () => {
      server.unref();
      resolve(server);
    });
  });
}

function socketAnswers(name: string): Promise<boolean> {
  return new Promise((resolve) => {
    const connection = net.connect({ path: name });
    connection.once('connect', () => {
      connection.destroy();
      resolve(true);
    });
    connection.once('error', () => resolve(false));
  });
}
