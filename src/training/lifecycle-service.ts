import type { Principal } from '../auth/principal.js';
import { NotFoundError, UnprocessableError } from '../errors.js';
import type { CheckpointReleaser } from './checkpoint-release.js';
import type { BestCheckpoint, BestCheckpointQuery, CheckpointReleaseList, CheckpointState, RetentionApplied, RetentionPolicy, RetentionPolicyBody } from './lifecycle-schemas.js';
import * as repo from './repository.js';
import type { CheckpointListQuery, PageOf } from './schemas.js';
import type { TrainingService } from './service.js';

export interface LifecycleServiceDeps {
  db: repo.TrainingDb;
  training: TrainingService;
  releaser: CheckpointReleaser;
  /** Models the TTL sweep reads per query (default 100); every model with a TTL is swept, page by page. */
  ttlSweepPageSize?: number;
}

/** Metric names ART's log computes for its two splits: a policy may name them before the first log. */
const STANDARD_METRICS = ['train', 'val'].flatMap((split) => ['reward', 'reward_std_dev', 'exception_rate'].map((name) => `${split}/${name}`));
/** How many known names a 422 lists. */
const LISTED_METRICS = 20;
/** Models with a TTL read per query of the expiry sweep; each model is applied in its own transaction. */
const TTL_SWEEP_PAGE = 100;

function stateJson(state: repo.CheckpointState): CheckpointState {
  const { uri: _uri, ...shown } = state;
  return shown;
}

/**
 * The checkpoint lifecycle (docs/training.md, "Checkpoint lifecycle"): a model's retention policy,
 * applied when a checkpoint lands, on request and by the TTL sweep; pins; the lifecycle view of
 * checkpoints. Every call is scoped like the rest of the training API: another entity's model is a 404.
 */
export class LifecycleService {
  private readonly db: repo.TrainingDb;

  constructor(private readonly deps: LifecycleServiceDeps) {
    this.db = deps.db;
  }

  private async model(principal: Principal, modelId: string): Promise<repo.StoredModel> {
    return this.deps.training.model(await this.deps.training.scope(principal), modelId);
  }

  async getRetention(principal: Principal, modelId: string): Promise<RetentionPolicy> {
    return repo.getRetention(this.db, { model: await this.model(principal, modelId) });
  }

  /**
   * Replaces the policy; it takes effect at the next checkpoint, the next TTL sweep, or an apply. The
   * metric must be one the model logged or its checkpoints carry (or one of ART's standard split metrics),
   * so that a misspelt name is a 422 rather than a policy under which nothing is ever best.
   */
  async setRetention(principal: Principal, modelId: string, body: RetentionPolicyBody): Promise<RetentionPolicy> {
    const model = await this.model(principal, modelId);
    const policy: RetentionPolicy = {
      keep_latest: body.keep_latest ?? null,
      keep_best: body.best_metric == null ? null : (body.keep_best ?? 1),
      best_metric: body.best_metric ?? null,
      best_mode: body.best_mode,
      ttl_seconds: body.ttl_seconds ?? null,
    };
    if (policy.best_metric !== null) {
      const known = [...new Set([...(await repo.knownMetricNames(this.db, { model })), ...STANDARD_METRICS])].sort();
      if (!known.includes(policy.best_metric)) {
        const listed = known.slice(0, LISTED_METRICS).join(', ') + (known.length > LISTED_METRICS ? ', ...' : '');
        throw new UnprocessableError(
          `Value error, unknown metric ${JSON.stringify(policy.best_metric)}: model ${model.id} has logged no metric by that name; known: ${listed}`,
          ['body', 'best_metric'],
          { input: policy.best_metric },
        );
      }
    }
    await repo.setRetention(this.db, { model, policy });
    return policy;
  }

  /** Applies the policy now: deletes what it does not keep and what has expired. */
  async applyRetention(principal: Principal, modelId: string): Promise<RetentionApplied> {
    const model = await this.model(principal, modelId);
    const { deleted, expired } = await this.apply(model);
    return { deleted_steps: deleted.map((c) => c.step).sort((a, b) => a - b), expired_steps: expired.map((c) => c.step).sort((a, b) => a - b) };
  }

  private async apply(model: repo.StoredModel): Promise<{ deleted: repo.DeletedCheckpoint[]; expired: repo.DeletedCheckpoint[] }> {
    const result = await this.db.transaction().execute(async (trx) => {
      const policy = await repo.getRetention(trx, { model });
      return repo.applyRetention(trx, { model, policy });
    });
    await this.deps.releaser.released(model, [...result.deleted, ...result.expired]);
    return result;
  }

  /**
   * Applies the policy of the model a checkpoint just landed on (the worker's complete has committed: a
   * failure here never undoes a registered checkpoint; the next landing, sweep or apply catches up).
   */
  async checkpointLanded(modelId: string): Promise<void> {
    const model = await repo.findLiveModelById(this.db, { modelId });
    if (model) await this.apply(model);
  }

  /**
   * Deletes expired checkpoints of every model with a TTL; safe in every process at once. Pages through
   * the models by id until a short page (a single page of 100 left the models with the highest ids never
   * swept), one small transaction per model. Also forgets the deleted checkpoints kept as page cursors
   * for longer than DELETED_CURSOR_HOURS.
   */
  async expireCheckpoints(): Promise<number> {
    await repo.forgetOldDeletedCheckpoints(this.db);
    const limit = this.deps.ttlSweepPageSize ?? TTL_SWEEP_PAGE;
    let count = 0;
    let after: string | undefined;
    for (;;) {
      const models = await repo.modelsWithTtl(this.db, { after, limit });
      for (const model of models) {
        const { deleted, expired } = await this.apply(model);
        count += deleted.length + expired.length;
      }
      if (models.length < limit) return count;
      after = models[models.length - 1].id;
    }
  }

  async listCheckpointStates(principal: Principal, modelId: string, query: CheckpointListQuery): Promise<PageOf<CheckpointState>> {
    const model = await this.model(principal, modelId);
    const policy = await repo.getRetention(this.db, { model });
    const page = await repo.listCheckpointStates(this.db, { model, policy, ...query });
    if (!page) {
      throw new UnprocessableError(`Value error, after is not the id of a checkpoint of model ${model.id}`, ['query', 'after'], { input: query.after });
    }
    return { ...page, data: page.data.map(stateJson) };
  }

  async bestCheckpoint(principal: Principal, modelId: string, query: BestCheckpointQuery): Promise<BestCheckpoint> {
    const model = await this.model(principal, modelId);
    const best = await repo.bestCheckpoint(this.db, { model, ...query });
    return { metric: query.metric, mode: query.mode, checkpoint: best ?? null };
  }

  async setPinned(principal: Principal, modelId: string, step: number, pinned: boolean): Promise<CheckpointState> {
    const model = await this.model(principal, modelId);
    if (!(await repo.setPinned(this.db, { model, step, pinned }))) {
      throw new NotFoundError('checkpoint', undefined, { message: `model ${model.id} has no checkpoint at step ${step}` });
    }
    const policy = await repo.getRetention(this.db, { model });
    const state = await repo.findCheckpointState(this.db, { model, policy, step });
    if (!state) throw new NotFoundError('checkpoint', undefined, { message: `model ${model.id} has no checkpoint at step ${step}` });
    return stateJson(state);
  }

  // -------------------------------------------------------------------------------------------------------
  // Storage releases, for worker keys: their user's entities, every entity for an admin's key.

  private reachOf(principal: Principal): readonly string[] | 'all' {
    return principal.isAdmin ? 'all' : [...principal.entities];
  }

  async listReleases(principal: Principal, query: { limit: number; after?: string }): Promise<CheckpointReleaseList> {
    return { data: await repo.listReleases(this.db, { reach: this.reachOf(principal), ...query }) };
  }

  async acknowledgeReleases(principal: Principal, ids: readonly string[]): Promise<{ acknowledged: number }> {
    return { acknowledged: await repo.removeReleases(this.db, { reach: this.reachOf(principal), ids }) };
  }
}
