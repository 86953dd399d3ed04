import fs from 'node:fs';
import path from 'node:path';

/**
 * DATA_DIR/server-url: where the server holding the embedded database listens, so that the CLI, which calls
 * that server while it holds DATA_DIR, finds it whatever PORT its own shell has (or a port the server picked,
 * PORT=0). Deleted before the server listens and when it closes, so a file left by a killed server is never
 * read while another holder starts.
 */
export function serverUrlFile(dataDir: string): string {
  return path.join(dataDir, 'server-url');
}

export function recordServerUrl(dataDir: string, url: string): void {
  const file = serverUrlFile(dataDir);
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, `${url}\n`);
  fs.renameSync(temp, file); // never seen half-written
}

export function forgetServerUrl(dataDir: string): void {
  fs.rmSync(serverUrlFile(dataDir), { force: true });
}

/** The recorded address, or undefined when there is none (or it is not an http URL). */
export function recordedServerUrl(dataDir: string): string | undefined {
  try {
    const url = fs.readFileSync(serverUrlFile(dataDir), 'utf8').trim();
    return /^https?:\/\/[^\s/]+$/.test(url) ? url : undefined;
  } catch {
    return undefined;
  }
}
