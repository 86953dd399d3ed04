/**
 * A process that takes a data directory's lock when its parent says so (test/foundation/data-dir-lock.test.ts).
 * Messages in: { go: <epoch ms> } takes the lock at that instant, { release: true } lets it go.
 * Messages out: { ready: true }, then one reply to each message.
 */
import { acquireDataDirLock, DataDirLockedError, type DataDirLock } from '../../src/db/lock.js';

export type ChildCommand = { go: number } | { release: true };
export type ChildReply = { ready: true } | { acquired: true } | { acquired: false; error: string; message: string } | { released: true };

const dataDir = process.argv[2];
let lock: DataDirLock | undefined;
const reply = (message: ChildReply) => process.send!(message);

process.on('message', async (command: ChildCommand) => {
  if ('release' in command) {
    lock?.release();
    lock = undefined;
    reply({ released: true });
    return;
  }
  // A timer to just before the instant, then a spin: the starters contend within microseconds, not a timer's slack.
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, command.go - Date.now() - 20)));
  while (Date.now() < command.go);
  try {
    lock = await acquireDataDirLock(dataDir);
    reply({ acquired: true });
  } catch (error) {
    const known = error instanceof DataDirLockedError;
    reply({ acquired: false, error: known ? 'DataDirLockedError' : String(error), message: (error as Error).message });
  }
});
reply({ ready: true });
