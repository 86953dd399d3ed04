import { ConflictError, NotFoundError } from '../../errors.js';
import { fileDigest } from '../digest.js';
import * as repo from '../repositories/files.js';
import type { TracingDeps } from './deps.js';

/** Content-addressed files (reference §2.5): the digest is the bytes digest the JS client computes itself. */

export async function createFile(
  deps: TracingDeps,
  args: { projectId: string; name: string; content: Buffer; expectedDigest?: string | null },
): Promise<{ digest: string }> {
  const digest = fileDigest(args.content);
  if (args.expectedDigest && args.expectedDigest !== digest) {
    throw new ConflictError(`Digest mismatch: expected ${args.expectedDigest}, computed ${digest}.`, { code: 'digest_mismatch' });
  }
  await repo.insertFile(deps.db, { projectId: args.projectId, digest, name: args.name, content: args.content });
  return { digest };
}

export async function readFile(deps: TracingDeps, args: { projectId: string; digest: string }): Promise<Buffer> {
  const content = await repo.readFileContent(deps.db, args);
  if (!content) throw new NotFoundError('file', undefined, { message: `File ${args.digest} not found` });
  return content;
}
