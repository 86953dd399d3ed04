import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import { NotFoundError } from '../errors.js';
import { findCheckpoint, findTrainedModel } from '../inference/checkpoints.js';
import { adapterBaseModel, ArchiveProblem, checkAdapterFiles, type AdapterFile } from '../training/adapter-archive.js';
import { listAdapterFiles, writeAdapterDirectory } from '../training/adapter-files.js';
import { localAdapterPath } from '../training/protocol.js';
import { registerImportedCheckpoint } from '../training/repository/checkpoints.js';
import * as cr from './checkpoint-repository.js';
import type { CheckpointModel, CheckpointRef } from './checkpoint-repository.js';
import { b64ToHex, manifestDigest, newToken, WandbRequestError } from './common.js';
import * as repo from './repository.js';
import type { ArtifactRow, ArtifactWithCollection, CollectionRow } from './repository.js';

/**
 * A trainable model's checkpoints as the versions of the W&B artifact `{entity}/{project}/{name}` of type
 * `lora` (docs/training.md, "W&B API"), which ART's checkpoint helpers pull and push. Version `v<N>` is
 * the checkpoint at step N, with the aliases `step<N>` and, for the newest, `latest`: versions keep their
 * number when older checkpoints are deleted. The files are the adapter's, read from the checkpoint's
 * directory on the same terms as an export; their MD5s are taken once and kept with the file's size and
 * modification time. A pushed `lora` artifact becomes the checkpoint its `step<N>` alias names.
 */

export const LORA = 'lora';
const STEP_ALIAS = /^step(\d{1,9})$/;
const VERSION_OR_STEP = /^(?:v|step)(\d{1,9})$/;

function statKey(file: { size: number; mtimeMs: number }): string {
  return `${file.size}:${file.mtimeMs}`;
}

async function md5File(file: string): Promise<string> {
  const hash = createHash('md5');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('base64');
}

const ref = (model: CheckpointModel) => `${model.entity}/${model.project}/${model.name}`;

export class CheckpointArtifacts {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly options: { adaptersDir: string; archiveLimitBytes: number },
  ) {}

  /** The live model a `lora` collection is named after: its checkpoints are the collection's versions. */
  async modelOf(collection: CollectionRow): Promise<CheckpointModel | undefined> {
    if (collection.type !== LORA) return undefined;
    return findTrainedModel(this.db, collection);
  }

  /**
   * A collection by name: a stored one of another type keeps its name. A live model of that name makes it
   * the model's `lora` collection (its row is made on first use), out of which any plain artifacts stored
   * under the name move to `<name>-legacy` first (moveLegacyVersions). A stored `lora` collection that no
   * live model is named after is served as stored while it holds plain artifacts (a `lora` artifact pushed
   * before checkpoints were artifacts, migration 0019); one holding none (a deleted model's, whose
   * checkpoints went with it) is gone.
   */
  async collection(scope: repo.ProjectScope, name: string): Promise<CollectionRow | undefined> {
    const stored = await repo.findCollection(this.db, { ...scope, name });
    if (stored && stored.type !== LORA) return stored;
    if (!(await findTrainedModel(this.db, { ...scope, name }))) return (await this.servedAsStored(stored)) ? stored : undefined;
    if (!stored) return repo.ensureCollection(this.db, { ...scope, name, type: LORA });
    await this.moveLegacyVersions(stored);
    return stored;
  }

  /**
   * Whether committing an artifact of this collection makes it a checkpoint (commitPush): in a `lora`
   * collection, unless no live model has its name and it is served as stored.
   */
  async takesCheckpoints(collection: CollectionRow): Promise<boolean> {
    if (collection.type !== LORA) return false;
    if (await this.modelOf(collection)) return true;
    return !(await this.servedAsStored(collection));
  }

  /**
   * Whether a stored `lora` collection that no live model is named after is served as stored: while it holds
   * plain artifacts (pushed before checkpoints were artifacts, or appended to since).
   */
  private async servedAsStored(stored: CollectionRow | undefined): Promise<boolean> {
    return stored !== undefined && (await cr.holdsPlainVersions(this.db, { collectionId: stored.id }));
  }

  /**
   * A model's collection that holds plain artifacts (its model registered under the name of a stored
   * `lora` artifact after the upgrade) hands them to `<name>-legacy`: they keep their numbers and aliases
   * there, and the model's checkpoints their version numbers here.
   */
  private async moveLegacyVersions(collection: CollectionRow): Promise<void> {
    if (!(await cr.holdsPlainVersions(this.db, { collectionId: collection.id }))) return;
    await this.db.transaction().execute((tx) => cr.moveLegacyVersions(tx, { collection }));
  }

  /**
   * The version an alias names: `latest`, `v<N>` or `step<N>`. A checkpoint whose adapter this server
   * cannot read is no artifact; named by its step, that is an error saying where it is stored.
   */
  async version(collection: CollectionRow, model: CheckpointModel, alias: string): Promise<ArtifactRow | undefined> {
    const step = VERSION_OR_STEP.exec(alias);
    if (!step && alias !== 'latest') return undefined;
    const checkpoint = await findCheckpoint(this.db, { modelId: model.id, step: step ? Number(step[1]) : 'latest' });
    return checkpoint && this.sync(collection, model, checkpoint, step !== null);
  }

  async latest(collection: CollectionRow, model: CheckpointModel): Promise<ArtifactRow | undefined> {
    return this.version(collection, model, 'latest');
  }

  /** A page of versions, newest first; checkpoints this server cannot read are left out of it. */
  async versions(collection: CollectionRow, model: CheckpointModel, page: { offset: number; limit: number }): Promise<{ rows: ArtifactRow[]; total: number }> {
    const { rows, total } = await cr.listCheckpointsOf(this.db, { modelId: model.id, ...page });
    const out: ArtifactRow[] = [];
    for (const checkpoint of rows) {
      const row = await this.sync(collection, model, checkpoint, false);
      if (row) out.push(row);
    }
    return { rows: out, total };
  }

  /** The aliases of checkpoint artifacts among these rows, `v<N>` first. */
  async aliases(artifacts: ArtifactRow[]): Promise<Map<number, string[]>> {
    const steps = await cr.checkpointSteps(this.db, { artifactIds: artifacts.filter((a) => a.checkpoint_id !== null).map((a) => a.id) });
    return new Map([...steps].map(([id, { step, latest }]) => [id, [`v${step}`, ...(latest ? ['latest'] : []), `step${step}`]]));
  }

  async isLive(artifact: ArtifactRow): Promise<boolean> {
    return artifact.checkpoint_id === null || cr.checkpointIsLive(this.db, { checkpointId: artifact.checkpoint_id });
  }

  /**
   * The W&B row of a checkpoint, made or brought up to date with its directory: files whose size or
   * modification time changed are hashed again.
   */
  private async sync(collection: CollectionRow, model: CheckpointModel, checkpoint: CheckpointRef, named: boolean): Promise<ArtifactRow | undefined> {
    const listed = await listAdapterFiles(checkpoint.uri, this.options.archiveLimitBytes);
    if (typeof listed === 'string') {
      if (!named) return undefined;
      throw new WandbRequestError(`The adapter of ${ref(model)}:step${checkpoint.step} is stored at ${checkpoint.uri}, ${listed}: download it from that storage directly.`);
    }
    const row = await cr.checkpointArtifact(this.db, { checkpointId: checkpoint.id });
    const known = new Map(row ? (await cr.checkpointFiles(this.db, { artifactId: row.id })).map((f) => [f.name, f]) : []);
    let changed = !row || known.size !== listed.length;
    const files: cr.CheckpointFileRow[] = [];
    for (const file of listed) {
      const stat = statKey(file);
      const old = known.get(file.name);
      if (old?.stat === stat) {
        files.push(old);
        continue;
      }
      changed = true;
      files.push({ name: file.name, md5: await md5File(file.path), size: file.size, stat, token: old?.token ?? newToken() });
    }
    if (!changed) return row;
    const digest = manifestDigest(Object.fromEntries(files.map((f) => [f.name, { digest: f.md5 }])));
    const size = files.reduce((sum, f) => sum + f.size, 0);
    return this.db
      .transaction()
      .execute((tx) => cr.putCheckpointArtifact(tx, { collectionId: collection.id, checkpoint, digest, size, manifestToken: row?.manifest_token ?? newToken(), files }));
  }

  /** A checkpoint file's bytes by its download token; undefined when the token names no checkpoint file. */
  async download(token: string): Promise<Readable | undefined> {
    const file = await cr.findCheckpointFileByToken(this.db, { token });
    if (!file) return undefined;
    const dir = localAdapterPath(file.uri);
    const full = dir && path.join(dir, file.name);
    const stat = full ? await fs.lstat(full).catch(() => undefined) : undefined;
    // Changed since its MD5 was taken: the client would store it under the wrong digest.
    if (!stat?.isFile() || statKey(stat) !== file.stat) throw new NotFoundError('file');
    return createReadStream(full!);
  }

  // -------------------------------------------------------------------------------------------------
  // Pushes

  /**
   * Checks a `lora` artifact about to be created against the model it is named after, before anything
   * is stored. Answers the step it will become (undefined: the next one), or the existing version when
   * that step already holds these very files (the SDK then uploads nothing); undefined for an artifact
   * stored as pushed (another type, or a `lora` collection served as stored).
   */
  async checkPush(
    scope: repo.ProjectScope,
    input: { name: string; type: string; digest: string; metadata: string | null; aliases: string[] },
  ): Promise<{ model: CheckpointModel; step?: number; existing?: ArtifactWithCollection } | undefined> {
    const stored = await repo.findCollection(this.db, { ...scope, name: input.name });
    if (stored && stored.type !== LORA) return undefined;
    const model = await findTrainedModel(this.db, { ...scope, name: input.name });
    const what = `${scope.entity}/${scope.project}/${input.name}`;
    if (input.type !== LORA) {
      if (!model) return undefined;
      throw new WandbRequestError(`${what} names a trainyard model, whose checkpoints are the "lora" artifact of that name: give a ${JSON.stringify(input.type)} artifact another name.`);
    }
    if (!model) {
      // Served as stored: a push appends a plain version, as before checkpoints were artifacts.
      if (await this.servedAsStored(stored)) return undefined;
      throw new WandbRequestError(`No trainyard model ${what}: a "lora" artifact becomes a checkpoint of the model it is named after; register the model first (POST /v1/preview/models).`);
    }
    if (stored) await this.moveLegacyVersions(stored);
    const base = (JSON.parse(input.metadata ?? '{}') as Record<string, unknown>)['wandb.base_model'];
    if (typeof base === 'string' && base !== model.baseModel) {
      throw new WandbRequestError(`The artifact's metadata names base model ${base}, but model ${what} is based on ${model.baseModel}.`);
    }
    const steps = input.aliases.map((alias) => STEP_ALIAS.exec(alias)).filter((m) => m !== null);
    if (steps.length > 1) throw new WandbRequestError('Give at most one step<N> alias: it names the step of the checkpoint the artifact becomes.');
    if (steps.length === 0) return { model };
    const step = Number(steps[0][1]);
    const checkpoint = await findCheckpoint(this.db, { modelId: model.id, step });
    if (!checkpoint) return { model, step };
    const collection = (await this.collection(scope, input.name))!;
    const row = await this.sync(collection, model, checkpoint, false);
    if (row?.digest === input.digest) return { model, step, existing: { artifact: row, collection } };
    throw stepTaken(model, step);
  }

  /**
   * Commits a pushed `lora` artifact whose manifest and files were checked against each other: the files
   * must be a PEFT adapter (safetensors only) of the model's base model; they are written to a fresh
   * directory under ADAPTERS_DIR and registered as the checkpoint. On any refusal the artifact and the
   * bytes uploaded for it are dropped, so nothing of it stays.
   */
  async commitPush(found: ArtifactWithCollection, contents: Record<string, { digest: string }>): Promise<ArtifactWithCollection> {
    const { artifact, collection } = found;
    const uploaded = [...Object.values(contents).map((c) => b64ToHex(c.digest)), ...(artifact.manifest_md5 ? [artifact.manifest_md5] : [])];
    const discard = async (error: Error): Promise<never> => {
      await this.db.transaction().execute(async (tx) => {
        await cr.deleteArtifact(tx, { artifactId: artifact.id });
        await cr.deleteUnreferencedBlobs(tx, { entity: collection.entity, md5s: uploaded });
      });
      throw error;
    };
    const model = await findTrainedModel(this.db, collection);
    if (!model) return discard(new WandbRequestError(`No trainyard model ${collection.entity}/${collection.project}/${collection.name}: it was deleted during the upload.`));
    const files: AdapterFile[] = [];
    let total = 0;
    for (const [name, entry] of Object.entries(contents)) {
      const content = (await repo.readBlob(this.db, { entity: collection.entity, md5: b64ToHex(entry.digest) }))!;
      total += content.length;
      files.push({ name, content });
    }
    try {
      if (total > this.options.archiveLimitBytes) throw new ArchiveProblem(`its files hold more than ADAPTER_ARCHIVE_LIMIT_MB (${this.options.archiveLimitBytes} bytes)`);
      checkAdapterFiles(files);
      const base = adapterBaseModel(files);
      if (base !== model.baseModel) throw new ArchiveProblem(`the adapter was trained on ${base}, but model ${ref(model)} is based on ${model.baseModel}`);
    } catch (error) {
      if (error instanceof ArchiveProblem) return discard(new WandbRequestError(`The artifact cannot become a checkpoint of ${ref(model)}: ${error.message}.`));
      throw error;
    }
    const step = artifact.pending_aliases.map((alias) => STEP_ALIAS.exec(alias)).find((m) => m !== null);
    const result = await writeAdapterDirectory(this.options.adaptersDir, files, async (id, dir) => {
      const stats = await Promise.all(files.map(async (f) => ({ name: f.name, size: f.content.length, stat: statKey(await fs.lstat(path.join(dir, f.name))) })));
      return this.db.transaction().execute(async (tx) => {
        const checkpoint = await registerImportedCheckpoint(tx, { model, id, uri: dir, step: step ? Number(step[1]) : undefined });
        if (typeof checkpoint === 'string') return checkpoint;
        await repo.deleteFilesNotIn(tx, { artifactId: artifact.id, names: Object.keys(contents) });
        const known = new Set((await repo.artifactFiles(tx, { artifactId: artifact.id })).map((f) => f.name));
        const missing = Object.entries(contents).filter(([name]) => !known.has(name));
        await repo.putArtifactFiles(tx, { artifactId: artifact.id, files: missing.map(([name, entry]) => ({ name, md5: entry.digest, token: newToken() })) });
        await cr.attachCheckpoint(tx, { artifactId: artifact.id, checkpoint, size: total, files: stats });
        await cr.deleteUnreferencedBlobs(tx, { entity: collection.entity, md5s: uploaded });
        return checkpoint;
      });
    });
    if (result === 'job_running') return discard(new WandbRequestError(`Model ${ref(model)} has a training job running, which will register the next step: push when it has ended.`));
    if (result === 'step_taken') return discard(stepTaken(model, Number(step![1])));
    return (await repo.findArtifact(this.db, { id: artifact.id }))!;
  }
}

function stepTaken(model: CheckpointModel, step: number): WandbRequestError {
  return new WandbRequestError(`Model ${ref(model)} already has a checkpoint at step ${step}: push under another step<N> alias, or delete that checkpoint first.`);
}
