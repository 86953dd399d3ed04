import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as training from '../../migrations/0002_training.js';
import * as checkpointLifecycle from '../../migrations/0009_checkpoint_lifecycle.js';
import * as deletedCheckpoints from '../../migrations/0016_deleted_checkpoints.js';
import * as workerKeys from '../../migrations/0017_worker_keys.js';
import * as claimIds from '../../migrations/0018_claim_ids.js';
import type { DatabaseHandle } from '../../src/db/index.js';
import {
  createModel,
  currentStep,
  deleteCheckpoints,
  deleteModel,
  findModel,
  findModelByName,
  insertTrajectoryGroups,
  jsonb,
  listCheckpoints,
  listMetricHistory,
  listModels,
  listTrajectoryGroups,
  recordMetrics,
  type StoredModel,
  type TrainingDb,
} from '../../src/training/repository.js';
import { TrajectoryGroup } from '../../src/training/schemas.js';
import { createEntity, openTrainingDb } from './db.js';

let handle: DatabaseHandle;
let db: TrainingDb;

beforeAll(async () => {
  ({ handle, db } = await openTrainingDb());
});
afterAll(async () => {
  await handle.close();
});

async function newModel(overrides: Partial<{ entityId: string; project: string; name: string }> = {}): Promise<StoredModel> {
  const entityId = overrides.entityId ?? (await createEntity(db));
  const model = await createModel(db, {
    entityId,
    project: overrides.project ?? 'proj',
    name: overrides.name ?? `model-${crypto.randomUUID().slice(0, 8)}`,
    baseModel: 'Qwen/Qwen3-14B',
  });
  return model!;
}

async function addCheckpoints(model: StoredModel, steps: number[]): Promise<string[]> {
  const rows = steps.map((step) => ({ id: crypto.randomUUID(), model_id: model.id, step, uri: `s3://ckpt/${step}`, metrics: jsonb({}), job_id: null }));
  await db.insertInto('checkpoints').values(rows).execute();
  return rows.map((row) => row.id);
}

describe('models', () => {
  it('creates a model and finds it within the entities the caller reaches', async () => {
    const model = await newModel();
    expect(model).toMatchObject({ project: 'proj', base_model: 'Qwen/Qwen3-14B', run_id: null });
    expect(await findModel(db, { entityIds: [model.entity_id], modelId: model.id })).toEqual(model);
  });

  it('does not find a model of another entity, nor a malformed id', async () => {
    const model = await newModel();
    const other = await createEntity(db);
    expect(await findModel(db, { entityIds: [other], modelId: model.id })).toBeUndefined();
    expect(await findModel(db, { entityIds: [model.entity_id], modelId: 'not-a-uuid' })).toBeUndefined();
  });

  it('returns undefined when the (entity, project, name) is taken, and the existing one by name', async () => {
    const model = await newModel();
    const again = await createModel(db, { entityId: model.entity_id, project: 'proj', name: model.name, baseModel: 'x' });
    expect(again).toBeUndefined();
    expect(await findModelByName(db, { entityIds: [model.entity_id], entityId: model.entity_id, project: 'proj', name: model.name })).toEqual(model);
  });

  it('lets a deleted model name be registered again', async () => {
    const model = await newModel();
    await db.transaction().execute((trx) => deleteModel(trx, { model }));
    const again = await createModel(db, { entityId: model.entity_id, project: 'proj', name: model.name, baseModel: 'x' });
    expect(again?.id).not.toBe(model.id);
  });

  it('deletes a model with its checkpoints, logs and metrics', async () => {
    const model = await newModel();
    await addCheckpoints(model, [1, 2]);
    await insertTrajectoryGroups(db, { model, split: 'val', step: 2, groupsJson: [JSON.stringify(TrajectoryGroup.parse({}))] });
    await recordMetrics(db, { model, split: 'val', step: 2, metrics: { 'val/reward': 1 } });
    const result = await db.transaction().execute((trx) => deleteModel(trx, { model }));
    expect(result).toEqual({ deleted_checkpoints: 2, deleted: expect.arrayContaining([expect.objectContaining({ step: 1 }), expect.objectContaining({ step: 2 })]) });
    expect(await findModel(db, { entityIds: [model.entity_id], modelId: model.id })).toBeUndefined();
    expect(await db.selectFrom('trajectory_logs').select('id').where('model_id', '=', model.id).execute()).toEqual([]);
    expect(await db.selectFrom('metric_history').select('id').where('model_id', '=', model.id).execute()).toEqual([]);
  });

  it('lists a project`s models page by page in creation order', async () => {
    const entityId = await createEntity(db);
    const models: StoredModel[] = [];
    for (let i = 0; i < 5; i++) models.push(await newModel({ entityId, project: 'listing' }));
    const seen: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = (await listModels(db, { entityIds: [entityId], project: 'listing', after, limit: 2 }))!;
      seen.push(...page.data.map((m) => m.id));
      if (!page.has_more) break;
      after = page.last_id;
    }
    expect(seen).toEqual(models.map((m) => m.id));
  });
});

describe('checkpoint pagination', () => {
  const steps = [1, 2, 3, 4, 5, 6, 7];
  let model: StoredModel;
  let ids: Map<number, string>;

  beforeAll(async () => {
    model = await newModel();
    // Inserted out of order: pages follow the step, not the insertion.
    const shuffled = [4, 1, 7, 3, 6, 2, 5];
    const inserted = await addCheckpoints(model, shuffled);
    ids = new Map(shuffled.map((step, i) => [step, inserted[i]]));
  });

  for (const order of ['asc', 'desc'] as const) {
    for (let limit = 1; limit <= 8; limit++) {
      it(`walks every checkpoint in ${order} order with pages of ${limit}`, async () => {
        const expected = order === 'asc' ? steps : [...steps].reverse();
        const seen: number[] = [];
        let after: string | undefined;
        for (;;) {
          const page = (await listCheckpoints(db, { model, after, limit, order }))!;
          if (page.data.length === 0) {
            expect(page).toMatchObject({ has_more: false, first_id: '', last_id: '' });
            break;
          }
          expect(page.first_id).toBe(page.data[0].id);
          expect(page.last_id).toBe(page.data[page.data.length - 1].id);
          seen.push(...page.data.map((c) => c.step));
          expect(page.has_more).toBe(seen.length < steps.length);
          after = page.last_id;
        }
        expect(seen).toEqual(expected);
      });
    }

    it(`starts strictly after the cursor at every position in ${order} order`, async () => {
      const expected = order === 'asc' ? steps : [...steps].reverse();
      for (const [i, step] of expected.entries()) {
        const page = (await listCheckpoints(db, { model, after: ids.get(step), limit: 100, order }))!;
        expect(page.data.map((c) => c.step)).toEqual(expected.slice(i + 1));
      }
    });
  }

  it('gives the latest step with limit 1 in desc order', async () => {
    const page = (await listCheckpoints(db, { model, limit: 1, order: 'desc' }))!;
    expect(page.data).toEqual([expect.objectContaining({ step: 7, uri: 's3://ckpt/7', metrics: {} })]);
    expect(page.has_more).toBe(true);
  });

  it('returns undefined for a cursor that is not a checkpoint of this model', async () => {
    const other = await newModel();
    const [foreign] = await addCheckpoints(other, [1]);
    expect(await listCheckpoints(db, { model, after: foreign, limit: 20, order: 'asc' })).toBeUndefined();
    expect(await listCheckpoints(db, { model, after: 'garbage', limit: 20, order: 'asc' })).toBeUndefined();
  });

  it('lists nothing for a model without checkpoints', async () => {
    const empty = await newModel();
    expect(await listCheckpoints(db, { model: empty, limit: 1, order: 'desc' })).toEqual({ object: 'list', data: [], first_id: '', last_id: '', has_more: false });
  });
});

describe('deleteCheckpoints', () => {
  it('deletes the given steps and reports the ones it did not find', async () => {
    const model = await newModel();
    await addCheckpoints(model, [1, 2, 3]);
    expect(await deleteCheckpoints(db, { model, steps: [1, 3, 9, 3] })).toMatchObject({ deleted_count: 2, not_found_steps: [9] });
    expect((await listCheckpoints(db, { model, limit: 20, order: 'asc' }))!.data.map((c) => c.step)).toEqual([2]);
  });

  it('does nothing for an empty list', async () => {
    const model = await newModel();
    expect(await deleteCheckpoints(db, { model, steps: [] })).toEqual({ deleted_count: 0, not_found_steps: [], pinned_steps: [], in_use_steps: [], deleted: [] });
  });
});

describe('trajectory logs and metrics', () => {
  it('records at step 0 before any checkpoint and at the latest checkpoint`s step after', async () => {
    const model = await newModel();
    expect(await currentStep(db, { model })).toBe(0);
    await addCheckpoints(model, [1, 3]);
    expect(await currentStep(db, { model })).toBe(3);
  });

  it('stores every group of a log call in order, as sent', async () => {
    const model = await newModel();
    const groups = Array.from({ length: 2500 }, (_, i) => TrajectoryGroup.parse({ trajectories: [{ reward: i, messages_and_choices: [{ role: 'user', content: [1, 2] }] }] }));
    await db.transaction().execute((trx) => insertTrajectoryGroups(trx, { model, split: 'train', step: 0, groupsJson: groups.map((group) => JSON.stringify(group)) }));
    const stored = await listTrajectoryGroups(db, { model, split: 'train', step: 0 });
    expect(stored).toHaveLength(2500);
    expect(stored[1234]).toEqual(groups[1234]);
  });

  it('merges logged metrics into the checkpoint of that step', async () => {
    const model = await newModel();
    await addCheckpoints(model, [1]);
    await db.updateTable('checkpoints').set({ metrics: jsonb({ 'loss/train': 0.5 }) }).where('model_id', '=', model.id).execute();
    const result = await recordMetrics(db, { model, split: 'val', step: 1, metrics: { 'val/reward': 0.75 } });
    expect(result.merged_into_checkpoint).toBe(true);
    const page = (await listCheckpoints(db, { model, limit: 1, order: 'desc' }))!;
    expect(page.data[0].metrics).toEqual({ 'loss/train': 0.5, 'val/reward': 0.75 });
  });

  it('keeps the metric history per split in step order', async () => {
    const model = await newModel();
    await recordMetrics(db, { model, split: 'val', step: 0, metrics: { 'val/reward': 0.1 } });
    await recordMetrics(db, { model, split: 'train', step: 0, metrics: { 'train/reward': 0.2 } });
    await recordMetrics(db, { model, split: 'val', step: 1, metrics: { 'val/reward': 0.3 } });
    const history = (await listMetricHistory(db, { model, split: 'val', limit: 10, order: 'asc' }))!;
    expect(history.data.map((h) => [h.step, h.metrics])).toEqual([[0, { 'val/reward': 0.1 }], [1, { 'val/reward': 0.3 }]]);
    expect((await listMetricHistory(db, { model, limit: 10, order: 'asc' }))!.data).toHaveLength(3);
  });
});

describe('migrations 0002, 0009, 0016, 0017 and 0018', () => {
  it('drops every training table on down and creates them again on up', async () => {
    const scratch = await openTrainingDb();
    const raw = scratch.db as unknown as Kysely<unknown>;
    const tables = async () => (await raw.introspection.getTables()).map((t) => t.name).sort();
    await claimIds.down(raw);
    await workerKeys.down(raw);
    await deletedCheckpoints.down(raw);
    expect(await tables()).not.toContain('deleted_checkpoints');
    await checkpointLifecycle.down(raw);
    expect(await tables()).not.toContain('entity_claim_turns');
    await training.down(raw);
    expect(await tables()).toEqual(['api_keys', 'entities', 'memberships', 'users']);
    await training.up(raw);
    await checkpointLifecycle.up(raw);
    await deletedCheckpoints.up(raw);
    await workerKeys.up(raw);
    await claimIds.up(raw);
    expect(await tables()).toEqual(expect.arrayContaining(['job_events', 'checkpoint_releases', 'entity_claim_turns', 'deleted_checkpoints']));
    await scratch.handle.close();
  });
});
