import type { Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ConflictError, ForbiddenError, NotFoundError, UnprocessableError } from '../errors.js';
import type { HeldValue } from '../http/exact-numbers.js';
import { patternMismatch, RequestValidationError } from '../http/validation.js';
import { NAME_SEGMENT } from '../inference/model-name.js';
import type { CheckpointReleaser } from './checkpoint-release.js';
import { exactJsonTexts } from './exact-bodies.js';
import type { JobSignal } from './job-signal.js';
import { klReference } from './kl-reference.js';
import { computeLogMetrics } from './metrics.js';
import * as repo from './repository.js';
import type {
  Checkpoint,
  CheckpointListQuery,
  CheckpointPage,
  CreateSFTTrainingJob,
  CreateTrainingJob,
  DeleteCheckpointsRequest,
  DeleteCheckpointsResponse,
  DeleteModelResponse,
  EventListQuery,
  LogRequest,
  LogResponse,
  MetricHistory,
  MetricHistoryQuery,
  Model,
  ModelCreate,
  ModelListQuery,
  PageOf,
  StoredTrajectoryGroup,
  TrainingJob,
  TrainingJobEvent,
  TrainingJobListQuery,
  TrajectoryGroup,
  TrajectoryListQuery,
} from './schemas.js';
import { TRAINING_LIMITS } from './schemas.js';
import type { SftDataResolver } from './sft-data.js';

export interface TrainingServiceDeps {
  db: repo.TrainingDb;
  config: Config;
  releaser: CheckpointReleaser;
  signal: JobSignal;
  sftData: SftDataResolver;
  /** Notified when a job's status changed (its event streams read it again). */
  jobChanges?: JobSignal;
}

/** What the API shows of a model (the entity id stays inside). */
function modelJson(model: repo.StoredModel): Model {
  const { entity_id: _entityId, ...shown } = model;
  return shown;
}

/** What the API shows of a job: the documented fields, nothing of the lease. */
export function jobJson(job: repo.StoredJob): TrainingJob {
  return {
    id: job.id,
    model_id: job.model_id,
    kind: job.kind,
    status: job.status,
    created_at: job.created_at,
    training_start: job.training_start,
    training_end: job.training_end,
    error_message: job.error_message,
    attempt: job.attempt,
    base_step: job.base_step,
    target_step: job.target_step,
    cancel_requested: job.cancel_requested,
  };
}

function mapPage<T, U>(page: PageOf<T>, map: (item: T) => U): PageOf<U> {
  return { ...page, data: page.data.map(map) };
}

/**
 * The users' side of the training API (reference §3): models, checkpoints, trajectory logs, jobs
 * and their events. Every call is scoped to the entities the caller's key reaches; another entity's
 * model or job answers 404, a named entity the key cannot reach 403.
 */
export class TrainingService {
  private readonly db: repo.TrainingDb;
  private readonly scopes = new WeakMap<Principal, Promise<Map<string, string>>>();

  constructor(private readonly deps: TrainingServiceDeps) {
    this.db = deps.db;
  }

  // -------------------------------------------------------------------------------------------------------
  // Scope

  /** Entity name -> id for every entity the key reaches, cached per principal (auth caches principals). */
  private entityIds(principal: Principal): Promise<Map<string, string>> {
    let ids = this.scopes.get(principal);
    if (!ids) {
      ids = repo.findEntityIds(this.db, { names: [...principal.entities] });
      ids.catch(() => this.scopes.delete(principal));
      this.scopes.set(principal, ids);
    }
    return ids;
  }

  /** The entities the key reaches (also for the lifecycle service). */
  async scope(principal: Principal): Promise<repo.EntityScope> {
    return { entityIds: [...(await this.entityIds(principal)).values()] };
  }

  /** The id of an entity the key reaches, or 403 naming it. */
  private async reachableEntity(principal: Principal, entity: string, param: string): Promise<string> {
    const id = (await this.entityIds(principal)).get(entity);
    if (id === undefined) throw new ForbiddenError(`This API key cannot reach entity ${entity}.`, { param });
    return id;
  }

  /**
   * A live model the caller reaches, or 404. Takes the scope rather than the principal so that inside a
   * transaction it runs one query on the transaction (PGlite has one connection: a second query on the
   * pool would wait for the transaction forever). `lock` holds the row until the transaction ends
   * (repository/models.ts): writers take `share`, so that a concurrent delete waits for them or they for it.
   */
  async model(
    scope: repo.EntityScope,
    modelId: string,
    db: repo.TrainingDb = this.db,
    lock?: repo.ModelLock,
  ): Promise<repo.StoredModel> {
    const model = await repo.findModel(db, { ...scope, modelId, lock });
    if (!model) throw new NotFoundError('model', modelId);
    return model;
  }

  private async job(principal: Principal, jobId: string): Promise<repo.StoredJob> {
    const job = await repo.findJob(this.db, { ...(await this.scope(principal)), jobId });
    if (!job) throw new NotFoundError('training job', jobId);
    return job;
  }

  // -------------------------------------------------------------------------------------------------------
  // Models

  baseModels(): string[] {
    return [...this.deps.config.trainableBaseModels];
  }

  /** Registers a model; the same name again answers the existing one with `return_existing`, else 409. */
  async createModel(principal: Principal, body: ModelCreate): Promise<Model> {
    const entity = body.entity ?? principal.entity;
    const entityId = await this.reachableEntity(principal, entity, 'entity');
    const args = { entityId, project: body.project, name: body.name, baseModel: body.base_model };
    if (body.return_existing) {
      // Before the rules on new models: one registered under a name an older release allowed, or on a base model
      // before TRAINABLE_BASE_MODELS left it out, is still answered (ART asks at every start).
      const existing = await repo.findModelByName(this.db, { ...(await this.scope(principal)), ...args });
      if (existing) return modelJson(existing);
    }
    const allowed = this.deps.config.trainableBaseModels;
    if (allowed.length > 0 && !allowed.includes(body.base_model)) {
      throw new UnprocessableError(
        `Value error, ${body.base_model} is not a trainable base model on this server; use one of: ${allowed.join(', ')}`,
        ['body', 'base_model'],
        { input: body.base_model, ctx: { allowed: [...allowed] } },
      );
    }
    const misnamed = (['project', 'name'] as const).filter((field) => !NAME_SEGMENT.test(body[field]));
    if (misnamed.length > 0) throw new RequestValidationError(misnamed.map((field) => patternMismatch(['body', field], body[field], NAME_SEGMENT.source)));
    const created = await repo.createModel(this.db, args);
    if (created) return modelJson(created);
    const existing = await repo.findModelByName(this.db, { ...(await this.scope(principal)), ...args });
    if (existing && body.return_existing) return modelJson(existing);
    throw new ConflictError(
      `Model ${entity}/${body.project}/${body.name} already exists. Send "return_existing": true to get it.`,
      { param: 'name' },
    );
  }

  async getModel(principal: Principal, modelId: string): Promise<Model> {
    return modelJson(await this.model(await this.scope(principal), modelId));
  }

  async listModels(principal: Principal, query: ModelListQuery): Promise<PageOf<Model>> {
    const entityId = query.entity === undefined ? undefined : await this.reachableEntity(principal, query.entity, 'entity');
    const page = await repo.listModels(this.db, { ...(await this.scope(principal)), ...query, entityId });
    if (!page) throw new UnprocessableError('Value error, after is not the id of a model this key can see', ['query', 'after'], { input: query.after });
    return mapPage(page, modelJson);
  }

  /**
   * Deletes a model with its checkpoints, logged trajectories and metrics; its queued jobs are canceled and
   * running ones asked to stop. The inference router hears of the checkpoints to unload their adapters.
   * Deleting a model that is already deleted (a client retrying after a lost response) answers as the
   * first call did, with nothing left to delete; another entity's model stays a 404.
   */
  async deleteModel(principal: Principal, modelId: string): Promise<DeleteModelResponse> {
    const scope = await this.scope(principal);
    // A concurrent delete of the same model holds the row: this one waits, then finds it deleted.
    const outcome = await this.db.transaction().execute(async (trx) => {
      const model = await repo.findModel(trx, { ...scope, modelId, lock: 'delete' });
      if (!model) return { deleted: false as const, id: await repo.findDeletedModelId(trx, { ...scope, modelId }) };
      return { deleted: true as const, model, result: await repo.deleteModel(trx, { model }) };
    });
    if (!outcome.deleted) {
      if (outcome.id === undefined) throw new NotFoundError('model', modelId);
      return { model_id: outcome.id, deleted_checkpoints: 0, deleted_run: true };
    }
    const { model, result } = outcome;
    await this.deps.releaser.released(model, result.deleted);
    this.deps.signal.notify();
    this.deps.jobChanges?.notify();
    // There is no separate tracking run to delete: the model row is the run.
    return { model_id: model.id, deleted_checkpoints: result.deleted_checkpoints, deleted_run: true };
  }

  // -------------------------------------------------------------------------------------------------------
  // Checkpoints

  async listCheckpoints(principal: Principal, modelId: string, query: CheckpointListQuery): Promise<CheckpointPage> {
    const model = await this.model(await this.scope(principal), modelId);
    const page = await repo.listCheckpoints(this.db, { model, ...query });
    if (!page) {
      throw new UnprocessableError(`Value error, after is not the id of a checkpoint of model ${model.id}`, ['query', 'after'], {
        input: query.after,
      });
    }
    // Exactly the seed's item fields: id, step, metrics.
    return mapPage(page, ({ id, step, metrics }): Checkpoint => ({ id, step, metrics }));
  }

  /** Deletes by step; pinned checkpoints and running jobs' base checkpoints are spared and listed. */
  async deleteCheckpoints(principal: Principal, modelId: string, body: DeleteCheckpointsRequest): Promise<DeleteCheckpointsResponse> {
    const model = await this.model(await this.scope(principal), modelId);
    const result = await this.db.transaction().execute((trx) => repo.deleteCheckpoints(trx, { model, steps: body.steps }));
    await this.deps.releaser.released(model, result.deleted);
    const { deleted_count, not_found_steps, pinned_steps, in_use_steps } = result;
    return { deleted_count, not_found_steps, pinned_steps, in_use_steps };
  }

  // -------------------------------------------------------------------------------------------------------
  // Logs and metrics

  /**
   * Stores every group and records ART's metrics (reference §7) at the model's current step, merged into
   * that step's checkpoint. One transaction: a failed call stores nothing.
   */
  async log(principal: Principal, modelId: string, body: LogRequest, held?: readonly HeldValue<bigint>[]): Promise<LogResponse> {
    checkMetricNames(body.trajectory_groups);
    const metrics = computeLogMetrics(body.split, body.trajectory_groups);
    const groupsJson = exactJsonTexts(body.trajectory_groups, 'trajectory_groups', held);
    const scope = await this.scope(principal);
    return this.db.transaction().execute(async (trx) => {
      const model = await this.model(scope, modelId, trx, 'share');
      const step = await repo.currentStep(trx, { model });
      await repo.insertTrajectoryGroups(trx, { model, split: body.split, step, groupsJson });
      await repo.recordMetrics(trx, { model, split: body.split, step, metrics });
      return { step, metrics };
    });
  }

  async metricHistory(principal: Principal, modelId: string, query: MetricHistoryQuery): Promise<MetricHistory> {
    const model = await this.model(await this.scope(principal), modelId);
    const page = await repo.listMetricHistory(this.db, { model, ...query });
    if (!page) throw new UnprocessableError(`Value error, after is not the id of a metric record of model ${model.id}`, ['query', 'after'], { input: query.after });
    return page;
  }

  /** Stored trajectory groups at one (split, step), for the web UI's rollouts view. */
  async trajectories(principal: Principal, modelId: string, query: TrajectoryListQuery): Promise<PageOf<StoredTrajectoryGroup>> {
    const model = await this.model(await this.scope(principal), modelId);
    const rows = await repo.pageTrajectoryGroups(this.db, { model, ...query, limit: query.limit + 1 });
    const data = rows.slice(0, query.limit);
    return { object: 'list', data, first_id: data[0]?.id ?? '', last_id: data.at(-1)?.id ?? '', has_more: rows.length > query.limit };
  }

  // -------------------------------------------------------------------------------------------------------
  // Jobs

  /**
   * An RL job: the inline groups become the job's inputs, one per group. A `kl_penalty_reference_step` names
   * a checkpoint that must exist now (a 422 otherwise, rather than a failed job later); from here on deletes
   * and retention spare it until the job ends (repository/in-use.ts). A `kl_penalty_step_lag` reference
   * depends on the base step, which only the claim fixes: it is resolved there (repository/jobs.ts).
   */
  async createRlJob(principal: Principal, body: CreateTrainingJob, held?: readonly HeldValue<bigint>[]): Promise<{ id: string }> {
    const reference = klReference(body.experimental_config);
    return this.createJob(principal, {
      modelId: body.model_id,
      kind: 'rl',
      config: { experimental_config: body.experimental_config ?? {} },
      inputsJson: exactJsonTexts(body.trajectory_groups, 'trajectory_groups', held),
      check:
        reference?.field === 'kl_penalty_reference_step' && reference.step > 0
          ? (trx, model) => requireReferenceCheckpoint(trx, model, reference.step)
          : undefined,
    });
  }

  /**
   * An SFT job: the training data is resolved and copied into the job now, so that a reference that does
   * not resolve is the caller's 422 today rather than a failed job later, and later edits of the dataset
   * do not change what this job trains on.
   */
  async createSftJob(principal: Principal, body: CreateSFTTrainingJob): Promise<{ id: string }> {
    await this.model(await this.scope(principal), body.model_id); // 404 before any fetch of the data
    const rows = await this.deps.sftData.resolve(principal, body.training_data_url);
    return this.createJob(principal, {
      modelId: body.model_id,
      kind: 'sft',
      config: {
        training_data_url: body.training_data_url,
        sft_config: body.config ?? {},
        experimental_config: body.experimental_config ?? {},
      },
      inputsJson: rows.map((row) => JSON.stringify(row)),
    });
  }

  private async createJob(
    principal: Principal,
    args: {
      modelId: string;
      kind: 'rl' | 'sft';
      config: Record<string, unknown>;
      inputsJson: readonly string[];
      /** Throws to refuse the job, on the locked model before it is queued. */
      check?: (trx: repo.TrainingDb, model: repo.StoredModel) => Promise<void>;
    },
  ): Promise<{ id: string }> {
    const scope = await this.scope(principal);
    const job = await this.db.transaction().execute(async (trx) => {
      // Shared lock: a delete of the model waits until this job is queued (and then cancels it), or this
      // waits for the delete and finds no model: never a queued job on a deleted model.
      const model = await this.model(scope, args.modelId, trx, 'share');
      await args.check?.(trx, model);
      return repo.createJob(trx, { model, kind: args.kind, config: args.config, inputsJson: args.inputsJson, maxAttempts: this.deps.config.jobMaxAttempts });
    });
    this.deps.signal.notify();
    return { id: job.id };
  }

  async getJob(principal: Principal, jobId: string): Promise<TrainingJob> {
    return jobJson(await this.job(principal, jobId));
  }

  async listJobs(principal: Principal, query: TrainingJobListQuery): Promise<PageOf<TrainingJob>> {
    const page = await repo.listJobs(this.db, {
      ...(await this.scope(principal)),
      modelId: query.model_id,
      status: query.status,
      after: query.after,
      limit: query.limit,
    });
    if (!page) throw new UnprocessableError('Value error, after is not the id of a training job this key can see', ['query', 'after'], { input: query.after });
    return mapPage(page, jobJson);
  }

  /** QUEUED ends CANCELED now; RUNNING is asked to stop (the worker hears it on its next heartbeat). */
  async cancelJob(principal: Principal, jobId: string): Promise<TrainingJob> {
    const scope = await this.scope(principal);
    const job = await this.db.transaction().execute((trx) => repo.cancelJob(trx, { ...scope, jobId }));
    if (!job) throw new NotFoundError('training job', jobId);
    this.deps.signal.notify();
    this.deps.jobChanges?.notify();
    return jobJson(job);
  }

  async listEvents(principal: Principal, jobId: string, query: EventListQuery): Promise<PageOf<TrainingJobEvent>> {
    const job = await this.job(principal, jobId);
    return repo.listEvents(this.db, { job, ...query });
  }

  /**
   * The job, then its events after `after`: read in that order, a job that had ended when it was read has
   * all its events in the page (its last one commits with its status) unless the page has more.
   */
  async jobAndEvents(principal: Principal, jobId: string, query: EventListQuery): Promise<{ job: TrainingJob; events: PageOf<TrainingJobEvent> }> {
    const job = await this.job(principal, jobId);
    return { job: jobJson(job), events: await repo.listEvents(this.db, { job, ...query }) };
  }
}

/**
 * 422 unless the model has a checkpoint at `step` to be a KL reference. Holds the claim lock, which
 * checkpoint deletes and retention hold too (repository/checkpoints.ts): a delete that commits first is
 * seen here, and one that waits for this job sees it among the jobs that need the step.
 */
async function requireReferenceCheckpoint(trx: repo.TrainingDb, model: repo.StoredModel, step: number): Promise<void> {
  await repo.lockClaims(trx);
  if (await repo.findCheckpointByStep(trx, { model, step })) return;
  throw new UnprocessableError(
    `Value error, model ${model.id} has no checkpoint of step ${step} to be the KL reference (deleted, or not trained yet)`,
    ['body', 'experimental_config', 'kl_penalty_reference_step'],
    { input: step },
  );
}

/**
 * Each metrics map is bounded by its schema, but one log call's maps together make one metric record and
 * are merged into the step's checkpoint: their distinct names are bounded the same way.
 */
function checkMetricNames(groups: readonly TrajectoryGroup[]): void {
  const trajectoryNames = new Set<string>();
  const groupNames = new Set<string>();
  for (const group of groups) {
    for (const trajectory of group.trajectories ?? []) for (const name in trajectory.metrics) trajectoryNames.add(name);
    for (const name in group.metrics) groupNames.add(name);
  }
  const count = trajectoryNames.size + groupNames.size;
  if (count > TRAINING_LIMITS.metrics) {
    throw new UnprocessableError(
      `Value error, the trajectories and groups of one log call may name at most ${TRAINING_LIMITS.metrics} metrics in all; these name ${count}`,
      ['body', 'trajectory_groups'],
    );
  }
}
