import fs from 'node:fs/promises';
import type { Principal } from '../auth/principal.js';
import { ConflictError, NotFoundError, UnprocessableError } from '../errors.js';
import { adapterBaseModel, ArchiveProblem, readAdapterArchive, writeAdapterArchive, type AdapterFile } from './adapter-archive.js';
import { listAdapterFiles, writeAdapterDirectory } from './adapter-files.js';
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
    const listed = await listAdapterFiles(checkpoint.uri, this.deps.archiveLimitBytes);
    if (typeof listed === 'string') {
      throw new ConflictError(`The adapter of step ${step} is stored at ${checkpoint.uri}, ${listed}: download it from that storage directly.`, { code: 'adapter_unreadable' });
    }
    const files: AdapterFile[] = await Promise.all(listed.map(async (file) => ({ name: file.name, content: await fs.readFile(file.path) })));
    return { filename: `${model.name}-step${step}.tar.gz`, archive: writeAdapterArchive(files) };
  }

  /**
   * Registers an uploaded PEFT adapter as the model's next checkpoint. Everything is checked before a file
   * is written (readAdapterArchive); the files go to a fresh directory named after the checkpoint id, and
   * are removed again when the checkpoint cannot be registered.
   */
  async importArchive(principal: Principal, modelId: string, body: unknown): Promise<CheckpointState> {
    const scope = await this.deps.training.scope(principal);
    const model = await this.deps.training.model(scope, modelId);
    if (!Buffer.isBuffer(body) || body.length === 0) {
      throw new UnprocessableError('Value error, send the adapter archive (tar or tar.gz) as the request body with content-type application/gzip or application/x-tar', ['body'], { input: null });
    }
    let files: AdapterFile[];
    try {
      files = await readAdapterArchive(body, this.deps.archiveLimitBytes);
      const base = adapterBaseModel(files);
      if (base !== model.base_model) {
        throw new ArchiveProblem(`the adapter was trained on ${base}, but model ${model.id} is based on ${model.base_model}`);
      }
    } catch (error) {
      if (error instanceof ArchiveProblem) throw new UnprocessableError(`Value error, ${error.message}`, ['body'], { input: null });
      throw error;
    }

    // The model is read again with the share lock writers take (repository/models.ts): a delete that ran
    // while the files were written is waited for and then found, so nothing lands on a deleted model (the
    // files are removed when the register returns no checkpoint).
    const checkpoint = await writeAdapterDirectory(this.deps.adaptersDir, files, (id, dir) =>
      this.deps.db.transaction().execute(async (trx) => {
        if (!(await repo.findModel(trx, { ...scope, modelId: model.id, lock: 'share' }))) return 'model_deleted' as const;
        return repo.registerImportedCheckpoint(trx, { model, id, uri: dir });
      }),
    );
    if (checkpoint === 'model_deleted') throw new NotFoundError('model', modelId);
    if (checkpoint === 'job_running' || checkpoint === 'step_taken') {
      throw new ConflictError(`A training job of model ${model.id} is running and will register the next step; import when it has ended.`, {
        code: 'job_running',
      });
    }
    const policy = await repo.getRetention(this.deps.db, { model });
    const { uri: _uri, ...shown } = (await repo.findCheckpointState(this.deps.db, { model, policy, step: checkpoint.step }))!;
    return shown;
  }
}
