import fs from 'node:fs/promises';
import path from 'node:path';
import type { Principal } from '../auth/principal.js';
import { ConflictError, NotFoundError, UnprocessableError } from '../errors.js';
import { adapterBaseModel, ALLOWED_FILES, ArchiveProblem, readAdapterArchive, writeAdapterArchive, type AdapterFile } from './adapter-archive.js';
import type { CheckpointState } from './lifecycle-schemas.js';
import * as repo from './repository.js';
import type { TrainingService } from './service.js';

export interface AdapterServiceDeps {
  db: repo.TrainingDb;
  training: TrainingService;
  /** Where imported adapters are stored, one directory per checkpoint id. */
  adaptersDir: string;
  archiveLimitBytes: number;
}

/** A local directory path from a checkpoint URI, or undefined when the URI names other storage. */
function localPath(uri: string): string | undefined {
  if (uri.startsWith('file://')) return decodeURIComponent(new URL(uri).pathname);
  return path.isAbsolute(uri) ? uri : undefined;
}

/**
 * Moving adapters in and out (docs/training.md, "Export and import"): a checkpoint's adapter as a
 * tar.gz when its URI is a directory this server can read; a PEFT adapter archive as the model's next
 * checkpoint, stored under ADAPTERS_DIR and served by name like a trained one.
 */
export class AdapterService {
  constructor(private readonly deps: AdapterServiceDeps) {}

  private async model(principal: Principal, modelId: string): Promise<repo.StoredModel> {
    return this.deps.training.model(await this.deps.training.scope(principal), modelId);
  }

  /**
   * The adapter files of the checkpoint at `step`, gzipped tar. Only the files a PEFT adapter consists of
   * are read (a trainer's output directory may hold optimizer state or pickles), regular files only:
   * a link in an adapter directory is not followed.
   */
  async exportArchive(principal: Principal, modelId: string, step: number): Promise<{ filename: string; archive: Buffer }> {
    const model = await this.model(principal, modelId);
    const checkpoint = await repo.findCheckpointByStep(this.deps.db, { model, step });
    if (!checkpoint) throw new NotFoundError('checkpoint', undefined, { message: `model ${model.id} has no checkpoint at step ${step}` });
    const dir = localPath(checkpoint.uri);
    const unreadable = (why: string) =>
      new ConflictError(`The adapter of step ${step} is stored at ${checkpoint.uri}, ${why}: download it from that storage directly.`, { code: 'adapter_unreadable' });
    if (dir === undefined) throw unreadable('which is not a path on this server');
    const files: AdapterFile[] = [];
    let total = 0;
    for (const name of ALLOWED_FILES) {
      const file = path.join(dir, name);
      const stat = await fs.lstat(file).catch(() => undefined);
      if (!stat?.isFile()) continue;
      total += stat.size;
      if (total > this.deps.archiveLimitBytes) throw unreadable(`whose files exceed ADAPTER_ARCHIVE_LIMIT_MB`);
      files.push({ name, content: await fs.readFile(file) });
    }
    if (!files.some((file) => file.name === 'adapter_config.json')) throw unreadable('where this server finds no adapter_config.json');
    return { filename: `${model.name}-step${step}.tar.gz`, archive: writeAdapterArchive(files) };
  }

  /**
   * Registers an uploaded PEFT adapter as the model's next checkpoint. Everything is checked before a file
   * is written (readAdapterArchive); the files go to a fresh directory named after the checkpoint id, and
   * are removed again when the checkpoint cannot be registered.
   */
  async importArchive(principal: Principal, modelId: string, body: unknown): Promise<CheckpointState> {
    const model = await this.model(principal, modelId);
    if (!Buffer.isBuffer(body) || body.length === 0) {
      throw new UnprocessableError('Value error, send the adapter archive (tar or tar.gz) as the request body with content-type application/gzip or application/x-tar', ['body'], { input: null });
    }
    let files: AdapterFile[];
    try {
      files = readAdapterArchive(body, this.deps.archiveLimitBytes);
      const base = adapterBaseModel(files);
      if (base !== model.base_model) {
        throw new ArchiveProblem(`the adapter was trained on ${base}, but model ${model.id} is based on ${model.base_model}`);
      }
    } catch (error) {
      if (error instanceof ArchiveProblem) throw new UnprocessableError(`Value error, ${error.message}`, ['body'], { input: null });
      throw error;
    }

    const id = crypto.randomUUID();
    const dir = path.join(this.deps.adaptersDir, id);
    let checkpoint: repo.StoredCheckpoint | undefined;
    try {
      await fs.mkdir(dir, { recursive: true });
      for (const file of files) await fs.writeFile(path.join(dir, file.name), file.content, { flag: 'wx' });
      checkpoint = await this.deps.db.transaction().execute((trx) => repo.registerImportedCheckpoint(trx, { model, id, uri: dir }));
    } finally {
      if (!checkpoint) await fs.rm(dir, { recursive: true, force: true });
    }
    if (!checkpoint) {
      throw new ConflictError(`A training job of model ${model.id} is running and will register the next step; import when it has ended.`, {
        code: 'job_running',
      });
    }
    const policy = await repo.getRetention(this.deps.db, { model });
    const { uri: _uri, ...shown } = (await repo.findCheckpointState(this.deps.db, { model, policy, step: checkpoint.step }))!;
    return shown;
  }
}
