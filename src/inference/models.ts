import type { Kysely } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Database } from '../db/schema.js';
import type { BackendRegistry } from './backends/registry.js';
import { listCheckpoints } from './checkpoints.js';
import type { Model, ModelList } from './schemas.js';

const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

/**
 * GET /v1/models: the served base models, then the caller's trained models. Each trained model is
 * listed by its bare name (its latest checkpoint, or its base model before the first one) and by
 * each checkpoint's `:stepN` name; `root` is the base model.
 */
export async function listModels(db: Kysely<Database>, registry: BackendRegistry, principal: Principal): Promise<ModelList> {
  const [served, checkpoints] = await Promise.all([registry.list(), listCheckpoints(db, { entities: [...principal.entities] })]);
  const data: Model[] = served.map((m) => ({ id: m.id, object: 'model', created: m.created, owned_by: m.backend.backend.name, root: m.root }));
  let previous = '';
  for (const row of checkpoints) {
    const name = `${row.entity}/${row.project}/${row.name}`;
    if (name !== previous) {
      data.push({ id: name, object: 'model', created: seconds(row.modelCreatedAt), owned_by: row.entity, root: row.baseModel });
      previous = name;
    }
    if (row.step !== null) {
      data.push({
        id: `${name}:step${row.step}`,
        object: 'model',
        created: seconds(row.checkpointCreatedAt ?? row.modelCreatedAt),
        owned_by: row.entity,
        root: row.baseModel,
      });
    }
  }
  return { object: 'list', data };
}
