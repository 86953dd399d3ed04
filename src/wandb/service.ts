import { randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Kysely } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Database } from '../db/schema.js';
import { UNSTORABLE_CHARACTER } from '../db/refusals.js';
import { MARK, parseWithExactNumbers, unmarkNumbers } from '../http/exact-numbers.js';
import { ConflictError, ForbiddenError, InvalidRequestError, NotFoundError, PayloadTooLargeError } from '../errors.js';
import { CheckpointArtifacts } from './checkpoint-artifacts.js';
import { b64ToHex, manifestDigest, md5, newToken, WandbRequestError } from './common.js';
import * as cr from './checkpoint-repository.js';
import * as repo from './repository.js';
import type { ArtifactRow, ArtifactWithCollection, CollectionRow, RunRow } from './repository.js';

export { manifestDigest, WandbRequestError } from './common.js';

/**
 * The W&B objects the wandb SDK creates and reads (docs/training.md, "W&B API"): runs with their history,
 * and artifacts (collections of versions `vN` with moving aliases) whose files are blobs stored per
 * entity; a trainable model's checkpoints are the versions of its `lora` artifact (checkpoint-artifacts.ts),
 * whose files stay in the checkpoints' directories. Every method is scoped to the entities the caller's key reaches; other entities' objects do
 * not exist for it.
 */

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const ALIAS = /^[A-Za-z0-9_.-]{1,128}$/;
const VERSION_ALIAS = /^v(\d{1,9})$/;
const MD5_B64 = /^[A-Za-z0-9+/]{22}==$/;
const MANIFEST_DIGEST = /^[0-9a-f]{32}$/;
/** The longest artifact path kept: W&B's own limit on a file path. */
const MAX_PATH = 512;
/** Files one artifact may hold; ART's LoRA checkpoints hold a handful. */
export const MAX_ARTIFACT_FILES = 10_000;
export const MAX_ALIASES = 32;
/**
 * Files one createRunFiles names: wandb-core asks for all of a run's files at once at its end, and a run
 * that logs an image a step has one file per image (the request stays under a few MB of names).
 */
export const MAX_RUN_FILES = 10_000;
/** A run's tags: W&B's SDK allows 1 to 64 characters each (wandb_settings.py); the count is ours. */
export const MAX_RUN_TAGS = 100;
const MAX_RUN_TAG = 64;
/** A run's notes (markdown) and group name: W&B documents no bound; these are ours. */
export const MAX_RUN_NOTES = 65_536;
export const MAX_RUN_GROUP = 128;
/** An artifact version's tags: W&B's pattern and length for a tag name (the SDK's TagInput); the count is ours. */
export const MAX_ARTIFACT_TAGS = 32;
const CHECKPOINT_ALIASES = "The aliases of a checkpoint's artifact are its step<N> and latest: they cannot be set.";
const ARTIFACT_TAG = /^[-_\p{L}\p{N}]+(?: +[-_\p{L}\p{N}]+)*$/u;
const MAX_ARTIFACT_TAG = 128;
/** History lines kept per run. */
const MAX_HISTORY_LINE = 1_000_000;
/** The history lines a resume sends back: the SDK reads only the last `_step`. */
const HISTORY_TAIL = 10;
export const FEATURES = [
  // These steer wandb 0.25 and 0.28 to the membership queries 0.31 always uses (reference §5).
  'PROJECT_ARTIFACT_COLLECTION_MEMBERSHIP',
  'ARTIFACT_COLLECTION_MEMBERSHIP_FILES',
  'ARTIFACT_COLLECTION_MEMBERSHIP_FILE_DOWNLOAD_HANDLER',
];

export function encodeId(type: string, id: number): string {
  return Buffer.from(`${type}:${id}`).toString('base64');
}

/** The number in an id `encodeId` made for this type, or undefined for anything else. */
export function decodeId(type: string, value: string): number | undefined {
  if (value.length > 64) return undefined;
  const match = /^([A-Za-z]+):(\d{1,15})$/.exec(Buffer.from(value, 'base64').toString('utf8'));
  return match && match[1] === type ? Number(match[2]) : undefined;
}

function checkName(what: string, value: string): string {
  if (!NAME.test(value)) {
    throw new WandbRequestError(`Invalid ${what} ${JSON.stringify(value.slice(0, 200))}: use 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit.`);
  }
  return value;
}

/** A relative path inside an artifact: no absolute paths, no `.`/`..` segments, nothing a file system reads as special. */
export function checkArtifactPath(path: string): string {
  const segments = path.split('/');
  if (path.length === 0 || path.length > MAX_PATH || /[\\\0]/.test(path) || segments.some((s) => s === '' || s === '.' || s === '..')) {
    throw new WandbRequestError(`Invalid artifact file path ${JSON.stringify(path.slice(0, 200))}: a relative path of at most ${MAX_PATH} characters without '.' or '..' segments.`);
  }
  return path;
}

export interface Membership {
  artifact: ArtifactRow;
  collection: CollectionRow;
}

export interface RunFileUpload {
  name: string;
  token: string;
}

export interface ArtifactFileUpload {
  name: string;
  artifact: ArtifactWithCollection;
  /** Null when the entity already holds these bytes: nothing to upload. */
  token: string | null;
}

export interface RunListing {
  entity: string;
  project: string;
  name: string;
  display_name: string | null;
  state: 'running' | 'finished' | 'failed';
  history_rows: number;
}

export interface RunHistory extends Omit<RunListing, 'history_rows'> {
  summary: Record<string, unknown>;
  history: { step: number; values: Record<string, unknown> }[];
  has_more: boolean;
}

/** What the training API shows of every run: its names and its state. */
function runFields(run: RunRow): Omit<RunListing, 'history_rows'> {
  const state = run.completed_at ? (run.exitcode === 0 || run.exitcode === null ? 'finished' : 'failed') : 'running';
  return { entity: run.entity, project: run.project, name: run.name, display_name: run.display_name, state };
}

export interface FileStreamBody {
  files?: Record<string, { offset: number; content: string[] }>;
  complete?: boolean;
  exitcode?: number | null;
}

export class WandbService {
  private readonly checkpoints: CheckpointArtifacts;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly options: { maxFileBytes: number; adaptersDir: string; archiveLimitBytes: number },
  ) {
    this.checkpoints = new CheckpointArtifacts(db, options);
  }

  /**
   * The entity a request names, or the key's own when it names none; the key must reach it. An empty
   * name is none: `wandb sync` of an offline run started without an entity sends `entityName: ""`.
   */
  reachableEntity(principal: Principal, entity: string | null | undefined): string {
    const name = entity || principal.entity;
    if (!principal.entities.has(name)) throw new WandbRequestError(`This API key cannot reach entity ${JSON.stringify(name)}.`);
    return name;
  }

  scope(principal: Principal, entity: string | null | undefined, project: string | null | undefined): repo.ProjectScope {
    if (project === null || project === undefined) throw new WandbRequestError('A project name is needed.');
    return { entity: this.reachableEntity(principal, entity), project: checkName('project name', project) };
  }

  // -------------------------------------------------------------------------------------------------
  // Runs

  async findRun(principal: Principal, scope: repo.ProjectScope, name: string): Promise<RunRow | undefined> {
    if (!principal.entities.has(scope.entity)) return undefined;
    return repo.findRun(this.db, { ...scope, name });
  }

  async upsertRun(
    principal: Principal,
    input: {
      id?: string | null;
      name?: string | null;
      entity?: string | null;
      project?: string | null;
      displayName?: string | null;
      jobType?: string | null;
      config?: string | null;
      summaryMetrics?: string | null;
      host?: string | null;
      tags?: string[] | null;
      notes?: string | null;
      group?: string | null;
    },
  ): Promise<{ run: RunRow; inserted: boolean }> {
    // As wandb-core writes them: a NaN in config or summary is kept, as the string "NaN" (the text is
    // otherwise stored as sent: a seed past 2^53 keeps its digits).
    const config = input.config == null ? input.config : nonFiniteAsStrings(input.config);
    const summaryMetrics = input.summaryMetrics == null ? input.summaryMetrics : nonFiniteAsStrings(input.summaryMetrics);
    if (config != null) checkJsonObject('config', config);
    if (summaryMetrics != null) checkJsonObject('summaryMetrics', summaryMetrics);
    const fields = {
      displayName: input.displayName ?? undefined,
      jobType: input.jobType ?? undefined,
      config: config ?? undefined,
      summary: summaryMetrics ?? undefined,
      tags: input.tags == null ? undefined : checkRunTags(input.tags),
      notes: input.notes == null ? undefined : checkLength('A run\'s notes field', input.notes, MAX_RUN_NOTES),
      group: input.group == null ? undefined : checkLength('A run\'s group name', input.group, MAX_RUN_GROUP),
    };
    // The public API's run.update() and run.summary.update() name the run by the `id` our answers gave
    // it (encodeId('Run', n)), with no name and no project: that run is updated, never a new one made.
    if (input.name == null && input.id != null) {
      const n = decodeId('Run', input.id);
      const found = n === undefined ? undefined : await repo.findRunById(this.db, { entities: principal.entities, id: n });
      if (!found) throw new WandbRequestError(`Run ${JSON.stringify(input.id.slice(0, 100))} not found.`);
      return { run: await repo.updateRun(this.db, { id: found.id, ...fields, reopen: input.host != null }), inserted: false };
    }
    const scope = this.scope(principal, input.entity, input.project ?? 'uncategorized');
    const name = checkName('run name', input.name ?? randomBytes(4).toString('hex'));
    return this.db.transaction().execute(async (tx) => {
      const { row, inserted } = await repo.insertRun(tx, {
        ...scope,
        name,
        displayName: input.displayName ?? name,
        jobType: input.jobType ?? null,
        config: config ?? null,
        tags: fields.tags,
        notes: fields.notes,
        group: fields.group,
      });
      if (inserted && summaryMetrics == null) return { run: row, inserted };
      const run = await repo.updateRun(tx, {
        id: row.id,
        ...fields,
        // wandb-core sends `host` only in the upsert that starts a run's process: on an existing run, a
        // resume, which makes a finished run live again. Its later upserts (config updates, the one at
        // finish) and the public API's run.update() send none, and leave the state as it is.
        reopen: !inserted && input.host != null,
      });
      return { run, inserted };
    });
  }

  async historyTail(run: RunRow): Promise<string[]> {
    return (await repo.historyLines(this.db, { runId: run.id, last: HISTORY_TAIL })).map((l) => l.content);
  }

  /** The runs of a project the key's entities hold (one by name, or all), without their history. */
  async listRuns(principal: Principal, args: repo.ProjectScope & { name?: string; limit: number }): Promise<{ data: RunListing[] }> {
    if (!principal.entities.has(args.entity)) throw new NotFoundError('W&B project', `${args.entity}/${args.project}`);
    const runs = await repo.listRuns(this.db, args);
    return {
      data: runs.map((run) => ({ ...runFields(run), history_rows: run.history_line_count })),
    };
  }

  /** A run's summary and its history rows after a step, for the training API (404 for runs the key does not reach). */
  async runHistory(principal: Principal, args: repo.ProjectScope & { run: string; afterStep: number; limit: number }): Promise<RunHistory> {
    const run = principal.entities.has(args.entity) ? await repo.findRun(this.db, { entity: args.entity, project: args.project, name: args.run }) : undefined;
    if (!run) throw new NotFoundError('W&B run', `${args.entity}/${args.project}/${args.run}`);
    const rows = await repo.historyRows(this.db, { runId: run.id, afterStep: args.afterStep, limit: args.limit + 1 });
    return {
      ...runFields(run),
      summary: run.summary ? (parseStored(run.summary) as Record<string, unknown>) : {},
      history: rows.slice(0, args.limit).map((row) => ({ step: row.step, values: parseStored(row.content) as Record<string, unknown> })),
      has_more: rows.length > args.limit,
    };
  }

  async createRunFiles(principal: Principal, input: { entity: string; project: string; run: string; files: string[] }): Promise<{ run: RunRow; files: RunFileUpload[] }> {
    const scope = this.scope(principal, input.entity, input.project);
    if (input.files.length > MAX_RUN_FILES) throw new WandbRequestError(`At most ${MAX_RUN_FILES} run files per request.`);
    const run = await repo.findRun(this.db, { ...scope, name: input.run });
    if (!run) throw new WandbRequestError(`Run ${scope.entity}/${scope.project}/${input.run} not found.`);
    const names = [...new Set(input.files.map(checkArtifactPath))];
    const stored = await repo.putRunFileTokens(this.db, { runId: run.id, files: names.map((name) => ({ name, token: newToken() })) });
    const byName = new Map(stored.map((f) => [f.name, f.token]));
    return { run, files: input.files.map((name) => ({ name, token: byName.get(name)! })) };
  }

  /**
   * One file_stream request: history lines land at their offsets, the summary replaces the last one,
   * `complete` ends the run. System events and console output are acknowledged and not kept.
   */
  async fileStream(principal: Principal, args: repo.ProjectScope & { run: string; body: FileStreamBody }): Promise<void> {
    if (!principal.entities.has(args.entity)) throw new NotFoundError('run', `${args.entity}/${args.project}/${args.run}`);
    const run = await repo.findRun(this.db, { entity: args.entity, project: args.project, name: args.run });
    if (!run) throw new NotFoundError('run', `${args.entity}/${args.project}/${args.run}`);
    const files = args.body.files ?? {};
    const history = files['wandb-history.jsonl'];
    let lines: string[] = [];
    if (history) {
      if (history.offset + history.content.length > MAX_HISTORY_LINE) throw new InvalidRequestError(`A run keeps at most ${MAX_HISTORY_LINE} history lines.`);
      lines = history.content.map((line, i) => {
        const what = `wandb-history.jsonl line ${history.offset + i}`;
        const { value, text } = storableJsonObject(what, line, (m) => new InvalidRequestError(m));
        // Rows are read back by step (a bigint): the SDK numbers every line.
        const step = value._step;
        if (!Number.isSafeInteger(step) || (step as number) < 0) throw new InvalidRequestError(`${what} has no "_step" (a non-negative integer).`);
        return text;
      });
    }
    const sentSummary = files['wandb-summary.json']?.content.at(-1);
    const summary = sentSummary === undefined ? undefined : storableJsonObject('wandb-summary.json', sentSummary, (m) => new InvalidRequestError(m)).text;
    await this.db.transaction().execute(async (tx) => {
      if (history) await repo.putHistoryLines(tx, { runId: run.id, offset: history.offset, lines });
      if (summary !== undefined) await repo.updateRun(tx, { id: run.id, summary });
      if (args.body.complete) await repo.finishRun(tx, { runId: run.id, exitcode: args.body.exitcode ?? null });
    });
  }

  // -------------------------------------------------------------------------------------------------
  // Artifacts: lookups

  /** An artifact by its GraphQL id, or undefined when it is not one the key reaches. */
  async artifactById(principal: Principal, id: string): Promise<ArtifactWithCollection | undefined> {
    const n = decodeId('Artifact', id);
    if (n === undefined) return undefined;
    const found = await repo.findArtifact(this.db, { id: n });
    return found && principal.entities.has(found.collection.entity) && (await this.checkpoints.isLive(found.artifact)) ? found : undefined;
  }

  /** A collection by name; a live model's name is its checkpoints' `lora` collection (checkpoint-artifacts.ts). */
  async collection(principal: Principal, scope: repo.ProjectScope, name: string): Promise<CollectionRow | undefined> {
    if (!principal.entities.has(scope.entity)) return undefined;
    return this.checkpoints.collection(scope, name);
  }

  /** The committed version a `vN` or an alias names in a collection. */
  async version(collection: CollectionRow, alias: string): Promise<ArtifactRow | undefined> {
    const model = await this.checkpoints.modelOf(collection);
    if (model) return this.checkpoints.version(collection, model, alias);
    const version = VERSION_ALIAS.exec(alias);
    if (version) return repo.findVersion(this.db, { collectionId: collection.id, versionIndex: Number(version[1]) });
    return repo.findVersion(this.db, { collectionId: collection.id, alias });
  }

  /** `name:alias` (or `name`, meaning `latest`) in a project. */
  async membership(principal: Principal, scope: repo.ProjectScope, nameWithAlias: string): Promise<Membership | undefined> {
    const colon = nameWithAlias.lastIndexOf(':');
    const name = colon < 0 ? nameWithAlias : nameWithAlias.slice(0, colon);
    const alias = colon < 0 ? 'latest' : nameWithAlias.slice(colon + 1);
    const collection = await this.collection(principal, scope, name);
    if (!collection) return undefined;
    const artifact = await this.version(collection, alias);
    return artifact ? { artifact, collection } : undefined;
  }

  async latest(collection: CollectionRow): Promise<ArtifactRow | undefined> {
    const model = await this.checkpoints.modelOf(collection);
    if (model) return this.checkpoints.latest(collection, model);
    return repo.latestCommitted(this.db, { collectionId: collection.id });
  }

  async versions(collection: CollectionRow, page: { offset: number; limit: number }): Promise<{ rows: ArtifactRow[]; total: number }> {
    const model = await this.checkpoints.modelOf(collection);
    if (model) return this.checkpoints.versions(collection, model, page);
    return repo.listCommitted(this.db, { collectionId: collection.id, ...page });
  }

  /** Each artifact's aliases, `vN` first (the SDK reads the version from it), then the named ones. */
  async aliases(artifacts: ArtifactRow[]): Promise<Map<number, string[]>> {
    const rows = await repo.aliasesOf(this.db, { artifactIds: artifacts.map((a) => a.id) });
    const out = new Map<number, string[]>();
    for (const artifact of artifacts) out.set(artifact.id, artifact.version_index === null ? [] : [`v${artifact.version_index}`]);
    for (const row of rows) out.get(row.artifact_id)?.push(row.alias);
    for (const [id, aliases] of await this.checkpoints.aliases(artifacts)) out.set(id, aliases);
    return out;
  }

  async files(artifact: ArtifactRow): Promise<{ name: string; md5: string; size: number | null; token: string; birth_artifact_id: number }[]> {
    return repo.artifactFiles(this.db, { artifactId: artifact.id });
  }

  // -------------------------------------------------------------------------------------------------
  // Artifacts: creation

  async createArtifact(
    principal: Principal,
    input: {
      entityName: string;
      projectName: string;
      artifactCollectionName: string;
      artifactTypeName: string;
      digest: string;
      description?: string | null;
      metadata?: string | null;
      runName?: string | null;
      storageRegion?: string | null;
      aliases?: { alias: string; artifactCollectionName: string }[] | null;
      tags?: { tagName: string }[] | null;
    },
  ): Promise<{ artifact: ArtifactRow; collection: CollectionRow; latest: ArtifactRow | undefined }> {
    const scope = this.scope(principal, input.entityName, input.projectName);
    const name = checkName('artifact name', input.artifactCollectionName);
    const type = checkName('artifact type', input.artifactTypeName);
    if (!MANIFEST_DIGEST.test(input.digest)) throw new WandbRequestError('Invalid artifact digest: 32 hexadecimal characters (MANIFEST_MD5).');
    if (input.metadata != null) checkJsonObject('metadata', input.metadata);
    const aliases = checkAliases(input.aliases ?? [], name);
    const tags = checkArtifactTags(input.tags ?? []);
    const push = await this.checkpoints.checkPush(scope, { name, type, digest: input.digest, metadata: input.metadata ?? null, aliases });
    if (push?.existing) return { ...push.existing, latest: undefined };
    return this.db.transaction().execute(async (tx) => {
      const collection = await repo.ensureCollection(tx, { ...scope, name, type });
      if (collection.type !== type) {
        throw new WandbRequestError(`Artifact ${scope.entity}/${scope.project}/${name} is of type ${JSON.stringify(collection.type)}, not ${JSON.stringify(type)}.`);
      }
      const latest = await repo.latestCommitted(tx, { collectionId: collection.id });
      // Same content as a committed version: that version is the answer, with the new aliases.
      // (A checkpoint's version was looked up by its step above: its aliases are its own.)
      const existing = push ? undefined : await repo.findCommittedByDigest(tx, { collectionId: collection.id, digest: input.digest });
      if (existing) {
        await repo.setAliases(tx, { collectionId: collection.id, artifactId: existing.id, aliases });
        const merged = await repo.changeArtifactTags(tx, { artifactId: existing.id, add: tags, remove: new Set() });
        if (merged.length > MAX_ARTIFACT_TAGS) throw new WandbRequestError(`An artifact has at most ${MAX_ARTIFACT_TAGS} tags.`);
        return { artifact: { ...existing, tags: merged }, collection, latest };
      }
      const artifact = await repo.insertArtifact(tx, {
        collectionId: collection.id,
        digest: input.digest,
        description: input.description ?? null,
        metadata: input.metadata ?? null,
        runName: input.runName ?? null,
        storageRegion: input.storageRegion ?? null,
        aliases,
        tags,
        manifestToken: newToken(),
      });
      return { artifact, collection, latest };
    });
  }

  /** A PENDING artifact of the key's entities, for the mutations that build one. */
  private async pending(principal: Principal, id: string): Promise<ArtifactWithCollection> {
    const found = await this.artifactById(principal, id);
    if (!found) throw new WandbRequestError(`Artifact ${JSON.stringify(id.slice(0, 100))} not found.`);
    return found;
  }

  async createManifest(principal: Principal, input: { artifactID: string; digest: string }): Promise<ArtifactWithCollection> {
    const found = await this.pending(principal, input.artifactID);
    if (input.digest !== '') {
      if (!MD5_B64.test(input.digest)) throw new WandbRequestError('Invalid manifest digest: the base64 MD5 of the manifest.');
      if (found.artifact.state === 'PENDING') await repo.setManifestExpected(this.db, { artifactId: found.artifact.id, md5: input.digest });
    }
    return found;
  }

  async createArtifactFiles(principal: Principal, files: { artifactID: string; name: string; md5: string }[]): Promise<ArtifactFileUpload[]> {
    if (files.length > MAX_ARTIFACT_FILES) throw new WandbRequestError(`At most ${MAX_ARTIFACT_FILES} artifact files per request.`);
    for (const file of files) {
      checkArtifactPath(file.name);
      if (!MD5_B64.test(file.md5)) throw new WandbRequestError(`Invalid md5 for ${JSON.stringify(file.name)}: the base64 MD5 of the file.`);
    }
    // Every artifact is found and checked before anything is written: a refused item leaves the others unwritten.
    const artifacts = new Map<string, ArtifactWithCollection>();
    for (const file of files) {
      if (artifacts.has(file.artifactID)) continue;
      const found = await this.pending(principal, file.artifactID);
      if (found.artifact.state !== 'PENDING') throw new WandbRequestError(`Artifact ${file.artifactID} is committed: its files cannot change.`);
      artifacts.set(file.artifactID, found);
    }
    // One write and two reads per artifact. A name given twice keeps its last md5, as separate calls would.
    const answers = new Map<string, { token: string; stored: boolean }>();
    await this.db.transaction().execute(async (tx) => {
      for (const [artifactID, found] of artifacts) {
        const latest = new Map<string, string>();
        for (const file of files) if (file.artifactID === artifactID) latest.set(file.name, file.md5);
        const names = [...latest.keys()];
        await repo.putArtifactFiles(tx, { artifactId: found.artifact.id, files: names.map((name) => ({ name, md5: latest.get(name)!, token: newToken() })) });
        const tokens = await repo.artifactFileTokens(tx, { artifactId: found.artifact.id, names });
        const stored = await repo.existingBlobs(tx, { entity: found.collection.entity, md5s: [...new Set([...latest.values()].map(b64ToHex))] });
        for (const name of names) {
          answers.set(`${artifactID}\u0000${name}`, { token: tokens.get(name)!, stored: stored.has(b64ToHex(latest.get(name)!)) });
        }
      }
    });
    return files.map((file) => {
      const answer = answers.get(`${file.artifactID}\u0000${file.name}`)!;
      return { name: file.name, artifact: artifacts.get(file.artifactID)!, token: answer.stored ? null : answer.token };
    });
  }

  /**
   * Checks the uploaded manifest against the uploaded blobs and the digest given at creation, then
   * makes the artifact the collection's next version and applies its aliases (with `latest`).
   */
  async commitArtifact(principal: Principal, artifactID: string): Promise<ArtifactWithCollection> {
    const { artifact, collection } = await this.pending(principal, artifactID);
    if (artifact.state === 'COMMITTED') return { artifact, collection };
    if (!artifact.manifest_md5) throw new WandbRequestError(`Artifact ${artifactID} has no manifest yet: upload it before committing.`);
    const manifestBytes = (await repo.readBlob(this.db, { entity: collection.entity, md5: artifact.manifest_md5 }))!;
    const contents = parseManifest(manifestBytes);
    if (manifestDigest(contents) !== artifact.digest) throw new WandbRequestError(`Artifact ${artifactID}: the manifest does not match the digest given at creation.`);
    let size = 0;
    for (const [path, entry] of Object.entries(contents)) {
      const blob = await repo.blobExists(this.db, { entity: collection.entity, md5: b64ToHex(entry.digest) });
      if (!blob) throw new WandbRequestError(`Artifact ${artifactID}: file ${JSON.stringify(path)} was never uploaded.`);
      if (entry.size !== undefined && entry.size !== blob.size) throw new WandbRequestError(`Artifact ${artifactID}: file ${JSON.stringify(path)} has ${blob.size} bytes, not ${entry.size}.`);
      size += blob.size;
    }
    if (await this.checkpoints.takesCheckpoints(collection)) return this.checkpoints.commitPush({ artifact, collection }, contents);
    await this.db.transaction().execute(async (tx) => {
      const known = new Map((await repo.artifactFiles(tx, { artifactId: artifact.id })).map((f) => [f.name, f]));
      const missing = Object.entries(contents).filter(([path, entry]) => known.get(path)?.md5 !== entry.digest);
      await repo.putArtifactFiles(tx, { artifactId: artifact.id, files: missing.map(([name, entry]) => ({ name, md5: entry.digest, token: newToken() })) });
      await repo.deleteFilesNotIn(tx, { artifactId: artifact.id, names: Object.keys(contents) });
      const sizes = await Promise.all(Object.entries(contents).map(async ([name, entry]) => ({ name, size: (await repo.blobExists(tx, { entity: collection.entity, md5: b64ToHex(entry.digest) }))!.size })));
      await repo.setFileSizes(tx, { artifactId: artifact.id, files: sizes });
      if (!(await repo.markCommitted(tx, { artifactId: artifact.id, collectionId: collection.id, size, fileCount: Object.keys(contents).length }))) return;
      await repo.setAliases(tx, { collectionId: collection.id, artifactId: artifact.id, aliases: [...new Set([...artifact.pending_aliases, 'latest'])] });
    });
    return (await repo.findArtifact(this.db, { id: artifact.id }))!;
  }

  async updateArtifact(
    principal: Principal,
    input: {
      artifactID: string;
      description?: string | null;
      metadata?: string | null;
      aliases?: { alias: string; artifactCollectionName: string }[] | null;
      tagsToAdd?: { tagName: string }[] | null;
      tagsToDelete?: { tagName: string }[] | null;
    },
  ): Promise<ArtifactWithCollection> {
    const found = await this.pending(principal, input.artifactID);
    if (input.metadata != null) checkJsonObject('metadata', input.metadata);
    const aliases = input.aliases ? checkAliases(input.aliases, found.collection.name) : [];
    if (found.artifact.checkpoint_id !== null && aliases.length) {
      throw new WandbRequestError(CHECKPOINT_ALIASES);
    }
    const added = checkArtifactTags(input.tagsToAdd ?? []);
    const deleted = new Set(checkArtifactTags(input.tagsToDelete ?? []));
    await this.db.transaction().execute(async (tx) => {
      if (added.length || deleted.size) {
        const tags = await repo.changeArtifactTags(tx, { artifactId: found.artifact.id, add: added, remove: deleted });
        if (tags.length > MAX_ARTIFACT_TAGS) throw new WandbRequestError(`An artifact has at most ${MAX_ARTIFACT_TAGS} tags.`);
      }
      await repo.updateArtifactFields(tx, {
        artifactId: found.artifact.id,
        description: input.description === undefined ? undefined : input.description,
        metadata: input.metadata === undefined ? undefined : input.metadata,
      });
      if (found.artifact.state === 'COMMITTED') await repo.setAliases(tx, { collectionId: found.collection.id, artifactId: found.artifact.id, aliases });
    });
    return (await repo.findArtifact(this.db, { id: found.artifact.id }))!;
  }

  /**
   * wandb 0.31's `artifact.aliases` edits (`artifact.save()`): addAliases points each alias at this
   * committed version, moving it from the version of the collection that held it, as a commit does;
   * deleteAliases takes them off this version (an alias another version holds stays there). `latest`
   * belongs to the newest version and cannot be deleted.
   */
  async changeAliases(
    principal: Principal,
    input: { artifactID: string; aliases: { alias: string; artifactCollectionName: string; entityName: string; projectName: string }[]; add: boolean },
  ): Promise<void> {
    const { artifact, collection } = await this.pending(principal, input.artifactID);
    if (artifact.state !== 'COMMITTED') throw new WandbRequestError(`Artifact ${input.artifactID} is not committed: its aliases are those given at creation.`);
    for (const alias of input.aliases) {
      if (this.reachableEntity(principal, alias.entityName) !== collection.entity || alias.projectName !== collection.project) {
        throw new WandbRequestError(`Alias ${JSON.stringify(alias.alias.slice(0, 200))} names project ${JSON.stringify(`${alias.entityName}/${alias.projectName}`.slice(0, 300))}, not ${JSON.stringify(`${collection.entity}/${collection.project}`)}.`);
      }
    }
    const aliases = checkAliases(input.aliases, collection.name);
    if (aliases.length === 0) return;
    if (artifact.checkpoint_id !== null) throw new WandbRequestError(CHECKPOINT_ALIASES);
    // `latest` follows the newest version: moved onto an older one, or taken off, it would name a version
    // that is not. Adding it where it already is changes nothing.
    if (aliases.includes('latest')) {
      const held = await repo.aliasesOf(this.db, { artifactIds: [artifact.id] });
      if (!input.add || !held.some((row) => row.alias === 'latest')) {
        throw new WandbRequestError(`The alias "latest" always names the newest version: it cannot be ${input.add ? 'moved to another' : 'deleted'}.`);
      }
    }
    if (input.add) {
      await repo.setAliases(this.db, { collectionId: collection.id, artifactId: artifact.id, aliases });
      return;
    }
    await repo.deleteAliases(this.db, { collectionId: collection.id, artifactId: artifact.id, aliases });
  }

  // -------------------------------------------------------------------------------------------------
  // Bytes: uploads and downloads by the capability tokens in server-minted URLs (the SDK sends no key)

  /** The artifact file an upload URL names, or why it takes no upload (404, 409). */
  async artifactFileUpload(token: string): Promise<NonNullable<Awaited<ReturnType<typeof repo.findFileByToken>>>> {
    const file = await repo.findFileByToken(this.db, { token });
    if (!file) throw new NotFoundError('upload URL');
    if (file.state !== 'PENDING') throw new ConflictError('This artifact is committed: its files cannot change.');
    return file;
  }

  async uploadArtifactFile(token: string, data: Buffer, contentMd5: string | undefined): Promise<void> {
    const file = await this.artifactFileUpload(token);
    await this.storeChecked(file.entity, data, file.md5, contentMd5);
  }

  /** The artifact whose manifest an upload URL names, or why it takes no upload (404, 409). */
  async manifestUpload(token: string): Promise<NonNullable<Awaited<ReturnType<typeof repo.findArtifactByManifestToken>>>> {
    const found = await repo.findArtifactByManifestToken(this.db, { token });
    if (!found) throw new NotFoundError('upload URL');
    if (found.artifact.state !== 'PENDING') throw new ConflictError('This artifact is committed: its manifest cannot change.');
    return found;
  }

  async uploadManifest(token: string, data: Buffer, contentMd5: string | undefined): Promise<void> {
    const found = await this.manifestUpload(token);
    parseManifest(data, (m) => new InvalidRequestError(m));
    const { hex } = this.checked(data, found.artifact.manifest_expected_md5 ?? undefined, contentMd5);
    const entity = found.collection.entity;
    await this.db.transaction().execute(async (tx) => {
      // The artifact's row first, then the entity's blobs, in the order a commit takes them. A commit that
      // came first leaves the manifest it checked alone.
      const pending = await repo.lockPendingArtifact(tx, { artifactId: found.artifact.id });
      if (!pending) throw new ConflictError('This artifact is committed: its manifest cannot change.');
      await cr.lockEntityBlobs(tx, entity);
      await repo.putBlob(tx, { entity, md5: hex, data });
      // A manifest sent again replaces the last one, whose bytes go unless something else names them.
      await repo.setManifestUploaded(tx, { artifactId: found.artifact.id, md5: hex });
      const previous = pending.manifestMd5;
      if (previous !== null && previous !== hex) await cr.deleteUnreferencedBlobs(tx, { entity, md5s: [previous] });
    });
  }

  /** The run file an upload URL names, or why it takes no upload (404, 403 once expired). */
  async runFileUpload(token: string): Promise<NonNullable<Awaited<ReturnType<typeof repo.findRunFileByToken>>>> {
    const file = await repo.findRunFileByToken(this.db, { token });
    if (!file) throw new NotFoundError('upload URL');
    if (!file.live) throw new ForbiddenError(`This upload URL has expired (${repo.RUN_FILE_URL_HOURS} hours after it was handed out): ask for the file's URL again (createRunFiles).`);
    return file;
  }

  async uploadRunFile(token: string, data: Buffer, contentMd5: string | undefined): Promise<void> {
    const file = await this.runFileUpload(token);
    const { hex } = this.checked(data, undefined, contentMd5);
    await this.db.transaction().execute(async (tx) => {
      // The file's row first, then the entity's blobs (the order every transaction takes them in).
      const previous = await repo.lockRunFile(tx, { runId: file.run_id, name: file.name });
      await cr.lockEntityBlobs(tx, file.entity);
      await repo.putBlob(tx, { entity: file.entity, md5: hex, data });
      // A file uploaded again (the summary, the log) replaces its last content, whose bytes go unless
      // something else names them: an upload URL holds one file, not a growing store.
      await repo.setRunFileMd5(tx, { runId: file.run_id, name: file.name, md5: hex });
      if (previous !== null && previous !== hex) await cr.deleteUnreferencedBlobs(tx, { entity: file.entity, md5s: [previous] });
    });
  }

  /** The bytes' MD5 once they pass the size limit, the MD5 announced for them, and their Content-MD5. */
  private checked(data: Buffer, expected: string | undefined, contentMd5: string | undefined): { hex: string } {
    if (data.length > this.options.maxFileBytes) throw new PayloadTooLargeError(`The file is larger than the limit of ${this.options.maxFileBytes} bytes.`);
    const digest = md5(data);
    if (expected !== undefined && digest.b64 !== expected) throw new InvalidRequestError(`The uploaded bytes have MD5 ${digest.b64}, not the ${expected} announced for this file.`);
    if (contentMd5 !== undefined && digest.b64 !== contentMd5) throw new InvalidRequestError(`The uploaded bytes have MD5 ${digest.b64}, not the Content-MD5 ${contentMd5}.`);
    return { hex: digest.hex };
  }

  private async storeChecked(entity: string, data: Buffer, expected: string | undefined, contentMd5: string | undefined): Promise<{ hex: string }> {
    const { hex } = this.checked(data, expected, contentMd5);
    await repo.putBlob(this.db, { entity, md5: hex, data });
    return { hex };
  }

  async downloadArtifactFile(token: string): Promise<Buffer | Readable> {
    const fromCheckpoint = await this.checkpoints.download(token);
    if (fromCheckpoint) return fromCheckpoint;
    const file = await repo.findFileByToken(this.db, { token });
    const data = file && file.state === 'COMMITTED' ? await repo.readBlob(this.db, { entity: file.entity, md5: b64ToHex(file.md5) }) : undefined;
    if (!data) throw new NotFoundError('file');
    return data;
  }

  /** The manifest as the SDK reads it, rebuilt from what is stored (no client paths of the uploader). */
  async downloadManifest(token: string): Promise<Record<string, unknown>> {
    const found = await repo.findArtifactByManifestToken(this.db, { token });
    if (!found || found.artifact.state !== 'COMMITTED') throw new NotFoundError('manifest');
    const contents: Record<string, unknown> = {};
    for (const file of await this.files(found.artifact)) {
      contents[file.name] = { digest: file.md5, size: file.size, birthArtifactID: encodeId('Artifact', file.birth_artifact_id) };
    }
    const storagePolicyConfig: Record<string, string> = { storageLayout: 'V2' };
    if (found.artifact.storage_region) storagePolicyConfig.storageRegion = found.artifact.storage_region;
    return { version: 1, storagePolicy: 'wandb-storage-policy-v1', storagePolicyConfig, contents };
  }

  // -------------------------------------------------------------------------------------------------
  // SFT data

  /**
   * The `train.jsonl` bytes of the dataset artifact a `wandb-artifact:///entity/project/name:alias` URL
   * names. Throws WandbRequestError for a URL that names nothing usable and for an entity the key
   * cannot reach (the SFT resolver turns those into its 422 and 403).
   */
  async datasetBytes(principal: Principal, url: string): Promise<Buffer> {
    const match = /^wandb-artifact:\/\/\/([^/]+)\/([^/]+)\/([^/:]+)(?::([^/:]+))?$/.exec(url);
    if (!match) throw new WandbRequestError('expected wandb-artifact:///<entity>/<project>/<artifact>:<version or alias>');
    const [, entity, project, name, alias = 'latest'] = match;
    this.reachableEntity(principal, entity);
    const found = await this.membership(principal, { entity, project }, `${name}:${alias}`);
    if (!found) throw new WandbRequestError(`artifact ${entity}/${project}/${name}:${alias} not found`);
    if (found.collection.type !== 'dataset') throw new WandbRequestError(`artifact ${entity}/${project}/${name} is of type ${JSON.stringify(found.collection.type)}, not "dataset"`);
    const file = (await this.files(found.artifact)).find((f) => f.name === 'train.jsonl');
    if (!file) throw new WandbRequestError(`artifact ${entity}/${project}/${name}:${alias} has no train.jsonl`);
    const data = await repo.readBlob(this.db, { entity, md5: b64ToHex(file.md5) });
    return data!;
  }
}

/** Stored JSON text with its integers beyond 2^53 as marked strings, which the route's `unmarkNumbers` writes back as digits. */
function parseStored(text: string): unknown {
  return parseWithExactNumbers(text, (literal) => `${MARK}${literal}`, { plain: true }).value;
}

function parseJsonObject(what: string, text: string, error: (message: string) => Error): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw error(`${what} is not valid JSON.`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw error(`${what} must be a JSON object.`);
  return value as Record<string, unknown>;
}

function checkJsonObject(what: string, text: string): void {
  parseJsonObject(what, text, (m) => new WandbRequestError(m));
}

/** Bare `NaN`, `Infinity` and `-Infinity` outside strings: how wandb-core's simplejsonext writes non-finite floats. */
const NON_FINITE_TOKEN = /"(?:[^"\\]|\\.)*"|-?Infinity|NaN/g;

/** JSON text with wandb-core's bare non-finite tokens written as strings ("NaN"), the rest as it was. */
function nonFiniteAsStrings(text: string): string {
  return text.includes('NaN') || text.includes('Infinity') ? text.replace(NON_FINITE_TOKEN, (token) => (token.startsWith('"') ? token : `"${token}"`)) : text;
}

/** The value with non-finite numbers as the strings "NaN", "Infinity" and "-Infinity"; throws on text jsonb cannot hold. */
function storable(value: unknown, fail: (text: string) => never): unknown {
  if (typeof value === 'number') return Number.isFinite(value) ? value : String(value);
  if (typeof value === 'string') return value.startsWith(MARK) ? value : UNSTORABLE_CHARACTER.test(value) ? fail(value) : value;
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item) => storable(item, fail));
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    if (UNSTORABLE_CHARACTER.test(key)) fail(key);
    // defineProperty: a "__proto__" key stays a key.
    Object.defineProperty(out, key, { value: storable(item, fail), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * A history line or summary as wandb-core writes it, made into text that reads back the same way
 * everywhere, PostgreSQL jsonb included: bare NaN / Infinity / -Infinity (and numbers too large for a
 * double) become the strings "NaN", "Infinity" and "-Infinity", as wandb's own export tooling writes
 * them, and the JSON is written out again, so `{"_step": 1.0}` is stored as `{"_step":1}`. Strings
 * holding U+0000 or a lone surrogate are refused: they cannot be stored.
 */
function storableJsonObject(what: string, text: string, error: (message: string) => Error): { value: Record<string, unknown>; text: string } {
  const sent = nonFiniteAsStrings(text);
  const value = storable(exactIntegers(sent, parseJsonObject(what, sent, error)), (bad) => {
    throw error(`${what} holds ${bad.includes('\u0000') ? 'U+0000' : 'a lone UTF-16 surrogate'}, which cannot be stored.`);
  }) as Record<string, unknown>;
  return { value, text: unmarkNumbers(JSON.stringify(value)) };
}

/**
 * The parsed object again with each integer literal beyond 2^53 (a token count, a 64-bit id) as a marked
 * string that `unmarkNumbers` writes back as its digits, as the training and tracing APIs keep them
 * (http/exact-numbers.ts); the object as parsed when the text has no such literal (fewer than 16 digits
 * in a row) or one of more digits than any client reads.
 */
function exactIntegers(text: string, parsed: Record<string, unknown>): Record<string, unknown> {
  if (!/\d{16}/.test(text)) return parsed;
  try {
    return parseWithExactNumbers(text, (literal) => `${MARK}${literal}`, { plain: true, scanFirst: true }).value as Record<string, unknown>;
  } catch {
    return parsed;
  }
}

function checkLength(what: string, value: string, max: number): string {
  if (value.length > max) throw new WandbRequestError(`${what} holds ${value.length} characters; at most ${max} are allowed.`);
  return value;
}

/** A run's tags, each once, in the order given. */
function checkRunTags(tags: string[]): string[] {
  const out = [...new Set(tags)];
  if (out.length > MAX_RUN_TAGS) throw new WandbRequestError(`A run has at most ${MAX_RUN_TAGS} tags, not ${out.length}.`);
  for (const tag of out) {
    if (tag.length === 0 || tag.length > MAX_RUN_TAG) throw new WandbRequestError(`Invalid run tag ${JSON.stringify(tag.slice(0, 200))}: a tag is 1 to ${MAX_RUN_TAG} characters.`);
  }
  return out;
}

/** Artifact tag names as the SDK sends them (`{tagName}`), each checked. */
function checkArtifactTags(tags: { tagName: string }[]): string[] {
  if (tags.length > MAX_ARTIFACT_TAGS) throw new WandbRequestError(`An artifact has at most ${MAX_ARTIFACT_TAGS} tags.`);
  return [
    ...new Set(
      tags.map(({ tagName }) => {
        if (tagName.length > MAX_ARTIFACT_TAG || !ARTIFACT_TAG.test(tagName)) {
          throw new WandbRequestError(`Invalid artifact tag ${JSON.stringify(tagName.slice(0, 200))}: 1 to ${MAX_ARTIFACT_TAG} letters, digits, '-' and '_', in words separated by spaces.`);
        }
        return tagName;
      }),
    ),
  ];
}

function checkAliases(aliases: { alias: string; artifactCollectionName: string }[], collection: string): string[] {
  if (aliases.length > MAX_ALIASES) throw new WandbRequestError(`At most ${MAX_ALIASES} aliases.`);
  const out: string[] = [];
  for (const { alias, artifactCollectionName } of aliases) {
    if (artifactCollectionName !== collection) throw new WandbRequestError(`Alias ${JSON.stringify(alias)} names collection ${JSON.stringify(artifactCollectionName)}, not ${JSON.stringify(collection)}.`);
    if (!ALIAS.test(alias) || VERSION_ALIAS.test(alias)) throw new WandbRequestError(`Invalid alias ${JSON.stringify(alias.slice(0, 200))}: 1 to 128 letters, digits, '.', '_' and '-', and not a version (vN).`);
    out.push(alias);
  }
  return [...new Set(out)];
}

/** The `contents` of a wandb-storage-policy-v1 manifest, each path checked. */
function parseManifest(data: Buffer, error: (message: string) => Error = (m) => new WandbRequestError(m)): Record<string, { digest: string; size?: number }> {
  let manifest: unknown;
  try {
    manifest = JSON.parse(data.toString('utf8'));
  } catch {
    throw error('The manifest is not valid JSON.');
  }
  const contents = (manifest as { contents?: unknown } | null)?.contents;
  if ((manifest as { storagePolicy?: unknown } | null)?.storagePolicy !== 'wandb-storage-policy-v1' || contents === null || typeof contents !== 'object' || Array.isArray(contents)) {
    throw error('The manifest is not a wandb-storage-policy-v1 manifest with "contents".');
  }
  const entries = Object.entries(contents as Record<string, unknown>);
  if (entries.length > MAX_ARTIFACT_FILES) throw error(`A manifest lists at most ${MAX_ARTIFACT_FILES} files.`);
  const out: Record<string, { digest: string; size?: number }> = {};
  for (const [path, entry] of entries) {
    try {
      checkArtifactPath(path);
    } catch (e) {
      throw error((e as Error).message);
    }
    const { digest, size, ref } = (entry ?? {}) as { digest?: unknown; size?: unknown; ref?: unknown };
    if (ref !== undefined && ref !== null) throw error(`Manifest entry ${JSON.stringify(path)} is a reference: only files stored here are supported.`);
    if (typeof digest !== 'string' || !MD5_B64.test(digest)) throw error(`Manifest entry ${JSON.stringify(path)} has no base64 MD5 digest.`);
    out[path] = { digest, size: typeof size === 'number' ? size : undefined };
  }
  return out;
}
