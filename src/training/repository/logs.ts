import { sql } from 'kysely';
import type { MetricRecord, PageOf, TrajectoryGroup } from '../schemas.js';
import { parseStoredJson } from '../exact-bodies.js';
import { chunkBySize, iso, jsonb, jsonbText, toPage, type TrainingDb } from './db.js';
import type { StoredModel } from './rows.js';

/**
 * Stores one log call's groups (their JSON texts), one row per group, in multi-row inserts. Several statements for a large
 * call: run it in a transaction so that a failed call stores nothing.
 */
export async function insertTrajectoryGroups(
  db: TrainingDb,
  args: { model: StoredModel; split: string; step: number; groupsJson: readonly string[] },
): Promise<{ log_id: string }> {
  const logId = crypto.randomUUID();
  const rows = args.groupsJson.map((json, seq) => ({ seq, json }));
  for (const chunk of chunkBySize(rows, (row) => row.json.length)) {
    await db
      .insertInto('trajectory_logs')
      .values(
        chunk.map((row) => ({
          model_id: args.model.id,
          log_id: logId,
          split: args.split,
          step: args.step,
          seq: row.seq,
          payload: jsonbText(row.json),
        })),
      )
      .execute();
  }
  return { log_id: logId };
}

/**
 * Appends to the metric history and merges the metrics into the checkpoint at that step, where clients
 * read `val/reward` to pick the best step (reference §3.3). Returns whether such a checkpoint exists.
 */
export async function recordMetrics(
  db: TrainingDb,
  args: { model: StoredModel; split: string; step: number; metrics: Record<string, number> },
): Promise<{ merged_into_checkpoint: boolean }> {
  await db
    .insertInto('metric_history')
    .values({ model_id: args.model.id, step: args.step, split: args.split, metrics: jsonb(args.metrics) })
    .execute();
  const merged = await db
    .updateTable('checkpoints')
    .set({ metrics: sql`metrics || ${jsonb(args.metrics)}` })
    .where('model_id', '=', args.model.id)
    .where('step', '=', args.step)
    .executeTakeFirst();
  return { merged_into_checkpoint: Number(merged.numUpdatedRows) > 0 };
}

/**
 * A page of the model's logged metrics, by step and then in the order they were logged (`desc`: the
 * reverse). `after` is the id of a record of this model; undefined is returned when it is not one, for a 422.
 */
export async function listMetricHistory(
  db: TrainingDb,
  args: { model: StoredModel; split?: string; after?: string; limit: number; order: 'asc' | 'desc' },
): Promise<PageOf<MetricRecord> | undefined> {
  let query = db
    .selectFrom('metric_history')
    .select(['id', 'step', 'split', 'metrics', 'created_at'])
    .where('model_id', '=', args.model.id);
  if (args.after !== undefined) {
    const cursor = await db
      .selectFrom('metric_history')
      .select(['id', 'step'])
      .where('model_id', '=', args.model.id)
      .where(sql<boolean>`id = cast(${args.after} as bigint)`)
      .executeTakeFirst();
    if (!cursor) return undefined;
    const beyond = args.order === 'asc' ? sql`>` : sql`<`;
    query = query.where(sql<boolean>`(step, id) ${beyond} (${cursor.step}, cast(${String(cursor.id)} as bigint))`);
  }
  if (args.split !== undefined) query = query.where('split', '=', args.split);
  const rows = await query.orderBy('step', args.order).orderBy('id', args.order).limit(args.limit + 1).execute();
  return toPage(
    rows.map((row) => ({ ...row, id: String(row.id), created_at: iso(row.created_at) })),
    args.limit,
  );
}

/** Logged groups of one split and step, in the order they were sent (for export and tests). */
export async function listTrajectoryGroups(
  db: TrainingDb,
  args: { model: StoredModel; split: string; step: number },
): Promise<TrajectoryGroup[]> {
  const rows = await db
    .selectFrom('trajectory_logs')
    .select('payload')
    .where('model_id', '=', args.model.id)
    .where('split', '=', args.split)
    .where('step', '=', args.step)
    .orderBy('id')
    .execute();
  return rows.map((row) => row.payload as TrajectoryGroup);
}

/** One page of the groups logged at (split, step), oldest first; `after` is the id of the last group seen. */
export async function pageTrajectoryGroups(
  db: TrainingDb,
  args: { model: StoredModel; split: string; step: number; after?: number; limit: number },
): Promise<{ id: string; step: number; split: string; group: unknown }[]> {
  let query = db
    .selectFrom('trajectory_logs')
    .select(['id', 'step', 'split', sql<string>`payload::text`.as('json')])
    .where('model_id', '=', args.model.id)
    .where('split', '=', args.split)
    .where('step', '=', args.step);
  if (args.after !== undefined) query = query.where(sql<boolean>`id > ${args.after}`);
  const rows = await query.orderBy('id').limit(args.limit).execute();
  // As text: a parse of the driver's would change integers beyond 2^53 (exact-bodies.ts).
  return rows.map((row) => ({ id: String(row.id), step: row.step, split: row.split, group: parseStoredJson(row.json) }));
}
