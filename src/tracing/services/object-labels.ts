import { InvalidRequestError, NotFoundError } from '../../errors.js';
import * as labels from '../repositories/object-labels.js';
import * as repo from '../repositories/objects.js';
import type { TracingDeps } from './deps.js';
import { parseVersionSelector } from './objects.js';

/**
 * User-set tags (per object version) and aliases (per object id, naming one version) as weave's trace
 * server keeps them (`weave.add_tags`, `weave.set_aliases`, ...). Names follow weave's rules
 * (weave/trace_server validation of tag and alias names): a broken rule is a 400 with its wording.
 */

export const MAX_TAG_LENGTH = 256;
export const MAX_ALIAS_LENGTH = 128;
// Python's `^[-\w]+( [-\w]+)*$`: letters, digits, '_' and '-', words separated by single spaces.
const TAG_PATTERN = /^[-\p{L}\p{N}_]+( [-\p{L}\p{N}_]+)*$/u;

function checkTag(name: string): void {
  if (!name) throw new InvalidRequestError('tag name must not be empty', { code: 'invalid_tag' });
  if ([...name].length > MAX_TAG_LENGTH) throw new InvalidRequestError(`tag name must be at most ${MAX_TAG_LENGTH} characters`, { code: 'invalid_tag' });
  if (!TAG_PATTERN.test(name)) {
    throw new InvalidRequestError(
      `tag name ${JSON.stringify(name)} is invalid: only alphanumeric characters, hyphens, underscores, and single spaces between words are allowed`,
      { code: 'invalid_tag' },
    );
  }
}

function checkAlias(name: string): void {
  if (!name) throw new InvalidRequestError('alias name must not be empty', { code: 'invalid_alias' });
  if (!name.trim()) throw new InvalidRequestError('alias name must not be whitespace-only', { code: 'invalid_alias' });
  if ([...name].length > MAX_ALIAS_LENGTH) throw new InvalidRequestError(`alias name must be at most ${MAX_ALIAS_LENGTH} characters`, { code: 'invalid_alias' });
  const bad = [...name].find((ch) => ch === '/' || ch === ':');
  if (bad) throw new InvalidRequestError(`alias name cannot contain character '${bad}'`, { code: 'invalid_alias' });
  // `latest` and `v<N>` already name versions (reference §3.3).
  if (/^v\d+$/.test(name)) throw new InvalidRequestError(`alias name '${name}' is reserved (matches version pattern v<number>)`, { code: 'reserved_alias' });
  if (name === 'latest') throw new InvalidRequestError(`alias name '${name}' is reserved`, { code: 'reserved_alias' });
}

const distinct = (names: readonly string[]) => [...new Set(names)];

interface VersionArgs {
  projectId: string;
  objectId: string;
  /** A digest; `latest`, `v<N>` or an alias also name one. */
  digest: string;
}

/** The live version `digest` names, under the object id's lock; 404 when there is none. */
async function lockedLiveDigest(trx: TracingDeps['db'], args: VersionArgs): Promise<string> {
  await repo.lockObjectId(trx, args);
  const row = await repo.readVersion(trx, { ...args, selector: parseVersionSelector(args.digest), metadataOnly: true });
  if (!row || row.deleted_at) throw new NotFoundError('object', undefined, { message: `Object version ${args.objectId}:${args.digest} not found` });
  return row.digest;
}

export async function addTags(deps: TracingDeps, args: VersionArgs & { tags: readonly string[] }): Promise<void> {
  args.tags.forEach(checkTag);
  await deps.db.transaction().execute(async (trx) => {
    const digest = await lockedLiveDigest(trx, args);
    await labels.insertTags(trx, { ...args, digest, tags: distinct(args.tags) });
  });
}

/** Removing a tag the version does not have, or from a version that does not exist, changes nothing. */
export async function removeTags(deps: TracingDeps, args: VersionArgs & { tags: readonly string[] }): Promise<void> {
  args.tags.forEach(checkTag);
  const row = await repo.readVersion(deps.db, { ...args, selector: parseVersionSelector(args.digest), metadataOnly: true });
  if (row) await labels.deleteTags(deps.db, { ...args, digest: row.digest, tags: distinct(args.tags) });
}

/** Each alias then names this version, moved from any other version of the object. */
export async function setAliases(deps: TracingDeps, args: VersionArgs & { aliases: readonly string[] }): Promise<void> {
  args.aliases.forEach(checkAlias);
  await deps.db.transaction().execute(async (trx) => {
    const digest = await lockedLiveDigest(trx, args);
    await labels.setAliases(trx, { ...args, digest, aliases: distinct(args.aliases) });
  });
}

/** Aliases belong to the object id, so no version is named; an alias not set changes nothing. */
export async function removeAliases(deps: TracingDeps, args: { projectId: string; objectId: string; aliases: readonly string[] }): Promise<void> {
  args.aliases.forEach(checkAlias);
  await labels.deleteAliases(deps.db, { ...args, aliases: distinct(args.aliases) });
}

export const listTags = (deps: TracingDeps, projectId: string) => labels.listTags(deps.db, projectId);
export const listAliases = (deps: TracingDeps, projectId: string) => labels.listAliases(deps.db, projectId);

