import { sql } from 'kysely';
import type { PageOf } from '../schemas.js';
import type { BestMode, CheckpointSource } from '../tables.js';
import { iso, lockClaims, toPage, type TrainingDb } from './db.js';
import { cursorStep, rememberDeletedCheckpoints } from './deleted.js';
import { stepsInUse } from './in-use.js';
import type { DeletedCheckpoint, StoredModel } from './rows.js';

/**
 * Checkpoint retention (docs/training.md, "Checkpoint lifecycle"). A model keeps its latest `keep_latest`
 * checkpoints, its best `keep_best` by `best_metric`, every pinned one, and those jobs need (a running job's
 * base checkpoint, a queued or running job's KL reference: repository/in-use.ts); with `keep_latest` null the count rule is off and every
 * checkpoint is kept. With `ttl_seconds`, a checkpoint that is none of these expires that long after it
 * was registered. Which checkpoints are latest and best is computed in SQL with window functions, so
 * listing a page and applying the policy read the same definition.
 */

export interface RetentionPolicy {
  keep_latest: number | null;
  keep_best: number | null;
  best_metric: string | null;
  best_mode: BestMode;
  ttl_seconds: number | null;
}

export interface CheckpointState {
  id: string;
  step: number;
  uri: string;
  metrics: Record<string, number>;
  pinned: boolean;
  source: CheckpointSource;
  created_at: string;
  /** Among the latest `keep_latest` (the latest one when the count rule is off). */
  latest: boolean;
  /** Among the best `keep_best` by `best_metric`; false when the policy names no metric. */
  best: boolean;
  /** When the checkpoint expires under the policy's TTL; null when it does not. */
  expires_at: string | null;
}

export async function getRetention(db: TrainingDb, { model }: { model: StoredModel }): Promise<RetentionPolicy> {
  const row = await db
    .selectFrom('models')
    .select(['keep_latest', 'keep_best', 'best_metric', 'best_mode', 'checkpoint_ttl_seconds'])
    .where('id', '=', model.id)
    .executeTakeFirstOrThrow();
  return {
    keep_latest: row.keep_latest,
    keep_best: row.keep_best,
    best_metric: row.best_metric,
    best_mode: row.best_mode,
    ttl_seconds: row.checkpoint_ttl_seconds,
  };
}

export async function setRetention(db: TrainingDb, args: { model: StoredModel; policy: RetentionPolicy }): Promise<void> {
  const { policy } = args;
  await db
    .updateTable('models')
    .set({
      keep_latest: policy.keep_latest,
      keep_best: policy.keep_best,
      best_metric: policy.best_metric,
      best_mode: policy.best_mode,
      checkpoint_ttl_seconds: policy.ttl_seconds,
    })
    .where('id', '=', args.model.id)
    .execute();
}

/** The metric names the model has logged or its checkpoints carry (a retention metric must be one). */
export async function knownMetricNames(db: TrainingDb, { model }: { model: StoredModel }): Promise<string[]> {
  const { rows } = await sql<{ name: string }>`
    select jsonb_object_keys(metrics) as name from metric_history where model_id = ${model.id}
    union
    select jsonb_object_keys(metrics) as name from checkpoints where model_id = ${model.id}
    order by name`.execute(db);
  return rows.map((row) => row.name);
}

/**
 * Every checkpoint of the model with its ranks under the policy, as a subquery. `best_rank` is null for a
 * checkpoint without a numeric value of the metric; ties on the metric go to the later step. The steps jobs
 * need (repository/in-use.ts) are one uncorrelated subquery, read once: correlated on each checkpoint's
 * model, a page of a model with 5,200 checkpoints and as many jobs took 4 s instead of 0.1 s.
 */
function ranked(model: StoredModel, policy: RetentionPolicy) {
  const metric = policy.best_metric ?? '';
  const sign = policy.best_mode === 'max' ? -1 : 1;
  const hasMetric = sql`jsonb_typeof(c.metrics -> ${metric}) = 'number'`;
  const latestCount = policy.keep_latest ?? 1;
  const bestCount = policy.best_metric === null ? 0 : (policy.keep_best ?? 1);
  return sql`
    select c.id, c.step, c.uri, c.metrics, c.pinned, c.source, c.created_at,
      row_number() over (order by c.step desc) <= ${latestCount} as latest,
      coalesce(${hasMetric} and row_number() over (
        partition by ${hasMetric}
        order by case when ${hasMetric} then (c.metrics ->> ${metric})::float8 * ${sign} end, c.step desc
      ) <= ${bestCount}, false) as best,
      c.step in (${stepsInUse(model.id)}) as in_use
    from checkpoints c
    where c.model_id = ${model.id}`;
}

/** The state columns over `ranked`: whether the count rule keeps it, and when it expires. */
function states(model: StoredModel, policy: RetentionPolicy) {
  const protectedRow = sql`(r.pinned or r.latest or r.best or r.in_use)`;
  const kept = policy.keep_latest === null ? sql`true` : protectedRow;
  const expiresAt =
    policy.ttl_seconds === null
      ? sql`null::timestamptz`
      : sql`case when ${protectedRow} then null else r.created_at + make_interval(secs => ${policy.ttl_seconds}) end`;
  return sql`select r.*, ${kept} as kept, ${expiresAt} as expires_at from (${ranked(model, policy)}) r`;
}

/** A state as SQL returns it: timestamps as dates. */
type StateRow = Omit<CheckpointState, 'created_at' | 'expires_at'> & { created_at: Date; expires_at: Date | null };

function toState(row: StateRow): CheckpointState {
  const { id, step, uri, metrics, pinned, source, latest, best } = row;
  return { id, step, uri, metrics, pinned, source, latest, best, created_at: iso(row.created_at), expires_at: iso(row.expires_at) };
}

/**
 * A page of the model's checkpoints with their lifecycle state, by step; `after` is a checkpoint id of the
 * model, also one deleted since (undefined is returned when it was never one, for a 422).
 */
export async function listCheckpointStates(
  db: TrainingDb,
  args: { model: StoredModel; policy: RetentionPolicy; after?: string; limit: number; order: 'asc' | 'desc' },
): Promise<PageOf<CheckpointState> | undefined> {
  let cursor = sql`true`;
  if (args.after !== undefined) {
    const step = await cursorStep(db, { model: args.model, after: args.after });
    if (step === undefined) return undefined;
    cursor = args.order === 'asc' ? sql`s.step > ${step}` : sql`s.step < ${step}`;
  }
  const direction = args.order === 'asc' ? sql`asc` : sql`desc`;
  const { rows } = await sql<StateRow>`
    select * from (${states(args.model, args.policy)}) s
    where ${cursor}
    order by s.step ${direction}
    limit ${args.limit + 1}`.execute(db);
  return toPage(rows.map(toState), args.limit);
}

/** One checkpoint's lifecycle state, by step. */
export async function findCheckpointState(
  db: TrainingDb,
  args: { model: StoredModel; policy: RetentionPolicy; step: number },
): Promise<CheckpointState | undefined> {
  const { rows } = await sql<StateRow>`select * from (${states(args.model, args.policy)}) s where s.step = ${args.step}`.execute(db);
  return rows[0] && toState(rows[0]);
}

/** Pins or unpins the checkpoint at `step`; false when the model has none there. */
export async function setPinned(db: TrainingDb, args: { model: StoredModel; step: number; pinned: boolean }): Promise<boolean> {
  const result = await db
    .updateTable('checkpoints')
    .set({ pinned: args.pinned })
    .where('model_id', '=', args.model.id)
    .where('step', '=', args.step)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/**
 * Deletes what the policy does not keep and what has expired, in one statement. The delete checks `pinned`
 * again on the row it deletes: a pin committed while this ran wins (PostgreSQL re-reads a row that changed
 * under a waiting delete). The claim lock is held, as `deleteCheckpoints` holds it: no job starts from a
 * checkpoint while it is being deleted, and the running jobs whose base checkpoints are kept are all
 * committed ones. Several statements with the releases: run it in a transaction.
 */
export async function applyRetention(
  db: TrainingDb,
  args: { model: StoredModel; policy: RetentionPolicy },
): Promise<{ deleted: DeletedCheckpoint[]; expired: DeletedCheckpoint[] }> {
  const { policy } = args;
  if (policy.keep_latest === null && policy.ttl_seconds === null) return { deleted: [], expired: [] };
  await lockClaims(db);
  const { rows } = await sql<DeletedCheckpoint & { expired: boolean }>`
    with doomed as (
      select s.id, not s.kept as dropped from (${states(args.model, policy)}) s
      where not s.kept or s.expires_at <= now()
    )
    delete from checkpoints c using doomed d
    where c.id = d.id and not c.pinned
    returning c.id, c.step, c.uri, c.source, not d.dropped as expired`.execute(db);
  await rememberDeletedCheckpoints(db, { model: args.model, checkpoints: rows });
  const deleted = rows.filter((row) => !row.expired).map(({ id, step, uri, source }) => ({ id, step, uri, source }));
  const expired = rows.filter((row) => row.expired).map(({ id, step, uri, source }) => ({ id, step, uri, source }));
  await recordReleases(db, { model: args.model, checkpoints: deleted, reason: 'retention' });
  await recordReleases(db, { model: args.model, checkpoints: expired, reason: 'expired' });
  return { deleted, expired };
}

function modelRows(db: TrainingDb) {
  return db
    .selectFrom('models as m')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .select(['m.id', 'm.entity_id', 'e.name as entity', 'm.project', 'm.name', 'm.base_model', 'm.run_id', 'm.created_at'])
    .where('m.deleted_at', 'is', null);
}

/** A page of the live models with a TTL by id, after the model `after`, for the sweeper to expire their checkpoints. */
export async function modelsWithTtl(db: TrainingDb, args: { after?: string; limit: number }): Promise<StoredModel[]> {
  let query = modelRows(db).where('m.checkpoint_ttl_seconds', 'is not', null);
  if (args.after !== undefined) query = query.where('m.id', '>', args.after);
  const rows = await query.orderBy('m.id').limit(args.limit).execute();
  return rows.map((row) => ({ ...row, created_at: iso(row.created_at) }));
}

/** A live model by id, unscoped: for server-side work on a model a worker's job named (retention at landing). */
export async function findLiveModelById(db: TrainingDb, args: { modelId: string }): Promise<StoredModel | undefined> {
  const row = await modelRows(db).where('m.id', '=', args.modelId).executeTakeFirst();
  return row && { ...row, created_at: iso(row.created_at) };
}

/** Releases one insert writes (5 parameters each; a statement holds at most 65,535). */
const RELEASE_BATCH = 5000;

/**
 * Records the storage of deleted trained checkpoints for the workers' side to release: their adapters
 * live where workers wrote them, which trainyard does not own. Imported checkpoints live in trainyard's
 * data directory and are removed by the service after the transaction commits. Storage that a remaining
 * checkpoint still names (a trainer that took no step may register its base checkpoint's URI again) is
 * not released; call this after the delete, in its transaction.
 */
export async function recordReleases(
  db: TrainingDb,
  args: { model: StoredModel; checkpoints: readonly DeletedCheckpoint[]; reason: 'deleted' | 'retention' | 'expired' },
): Promise<void> {
  // Each storage once, with the lowest step that named it: the step whose directory a worker wrote it in.
  const steps = new Map<string, number>();
  for (const c of args.checkpoints) {
    if (c.source === 'trained') steps.set(c.uri, Math.min(c.step, steps.get(c.uri) ?? c.step));
  }
  const uris = [...steps.keys()];
  if (uris.length === 0) return;
  const named = new Set(
    (await db.selectFrom('checkpoints').select('uri').where(sql<boolean>`uri = any(${uris.flatMap(storageForms)}::text[])`).execute()).map((row) => storageKey(row.uri)),
  );
  const released = uris.filter((uri) => !named.has(storageKey(uri)));
  if (released.length === 0) return;
  for (let i = 0; i < released.length; i += RELEASE_BATCH) {
    await db
      .insertInto('checkpoint_releases')
      .values(
        released.slice(i, i + RELEASE_BATCH).map((uri) => ({
          entity_id: args.model.entity_id,
          uri,
          reason: args.reason,
          created_at: sql<Date>`clock_timestamp()`,
          model_id: args.model.id,
          step: steps.get(uri) as number,
        })),
      )
      .execute();
  }
}

/** A checkpoint URI as storage is compared: `dir` and `dir/` are the same storage. */
function storageKey(uri: string): string {
  return uri.endsWith('/') ? uri.slice(0, -1) : uri;
}

/** The URIs that name the same storage as `uri` (compared for equality, as the URI index allows). */
export function storageForms(uri: string): string[] {
  const key = storageKey(uri);
  return [key, `${key}/`];
}

/** A release's storage as `storageKey` has it, in SQL. */
const releaseKey = sql<string>`(case when right(r.uri, 1) = '/' then left(r.uri, -1) else r.uri end)`;

/** Storage releases of the entities a worker key reaches (by name; 'all' for an admin's key), oldest first. */
export async function listReleases(
  db: TrainingDb,
  args: { reach: readonly string[] | 'all'; limit: number; after?: string },
): Promise<{ id: string; uri: string; reason: 'deleted' | 'retention' | 'expired'; created_at: string }[]> {
  if (args.reach !== 'all' && args.reach.length === 0) return [];
  let query = db
    .selectFrom('checkpoint_releases as r')
    .select(['r.id', 'r.uri', 'r.reason', 'r.created_at'])
    // Not while a job of the model trains that step again: it writes where the deleted checkpoint was.
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('training_jobs as j')
            .select(sql<number>`1`.as('one'))
            .whereRef('j.model_id', '=', 'r.model_id')
            .whereRef('j.target_step', '=', 'r.step')
            .where('j.status', '=', 'RUNNING'),
        ),
      ),
    )
    // Nor while a checkpoint names its storage, whoever recorded the release: older trainyards left releases
    // behind when a deleted step was trained again into the same directory (migration 0027). Two equalities
    // on `checkpoints.uri`, which its hash index serves.
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom('checkpoints as c').select(sql<number>`1`.as('one')).where(sql<boolean>`c.uri in (${releaseKey}, ${releaseKey} || '/')`))),
    );
  if (args.after !== undefined) query = query.where(sql<boolean>`r.id > cast(${args.after} as bigint)`);
  if (args.reach !== 'all') {
    query = query.innerJoin('entities as e', 'e.id', 'r.entity_id').where('e.name', 'in', [...args.reach]);
  }
  const rows = await query.orderBy('r.id').limit(args.limit).execute();
  return rows.map((row) => ({ id: String(row.id), uri: row.uri, reason: row.reason, created_at: iso(row.created_at) }));
}

/** Removes releases the worker side has done; ids of entities the key does not reach are left alone. */
export async function removeReleases(db: TrainingDb, args: { reach: readonly string[] | 'all'; ids: readonly string[] }): Promise<number> {
  if (args.ids.length === 0 || (args.reach !== 'all' && args.reach.length === 0)) return 0;
  let query = db.deleteFrom('checkpoint_releases').where(sql<boolean>`id in (${sql.join(args.ids.map(Number))})`);
  if (args.reach !== 'all') {
    query = query.where('entity_id', 'in', (eb) => eb.selectFrom('entities').select('entities.id').where('entities.name', 'in', [...(args.reach as readonly string[])]));
  }
  const result = await query.executeTakeFirst();
  return Number(result.numDeletedRows);
}
