import { createHash, randomBytes } from 'node:crypto';

/** A failure the GraphQL layer reports as a GraphQL error (HTTP 200, `errors`), as W&B does. */
export class WandbRequestError extends Error {}

/** The capability in a server-minted upload or download URL. */
export function newToken(): string {
  return randomBytes(24).toString('base64url');
}

export function md5(data: Buffer): { hex: string; b64: string } {
  const digest = createHash('md5').update(data).digest();
  return { hex: digest.toString('hex'), b64: digest.toString('base64') };
}

export function b64ToHex(b64: string): string {
  return Buffer.from(b64, 'base64').toString('hex');
}

/** The manifest digest of W&B's storage policy: the dedup key and what the client sends as `digest`. */
export function manifestDigest(contents: Record<string, { digest: string }>): string {
  const hash = createHash('md5').update('wandb-artifact-manifest-v1\n');
  for (const path of Object.keys(contents).sort()) hash.update(`${path}:${contents[path].digest}\n`);
  return hash.digest('hex');
}
