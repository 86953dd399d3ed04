import type { Kysely } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Database } from '../db/schema.js';
import { NotFoundError } from '../errors.js';
import type { BackendRegistry } from './backends/registry.js';
import { listCheckpoints } from './checkpoints.js';
import { formatCheckpointName, parseModelName } from './model-name.js';
import type { Model, ModelList, ModelPermission } from './schemas.js';

const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

/** vLLM's default permission entry: sampling, logprobs and viewing allowed, nothing else. */
function permission(id: string, created: number): ModelPermission {
  return {
    id: `modelperm-${id}`,
    object: 'model_permission',
    created,
    allow_create_engine: false,
    allow_sampling: true,
    allow_logprobs: true,
    allow_search_indices: false,
    allow_view: true,
    allow_fine_tuning: false,
    organization: '*',
    group: null,
    is_blocking: false,
  };
}

function card(id: string, created: number, ownedBy: string, root: string, parent: string | null, maxModelLen: number | null): Model {
  return { id, object: 'model', created, owned_by: ownedBy, root, parent, max_model_len: maxModelLen, permission: [permission(id, created)] };
}

/**
 * GET /v1/models: the served base models, then the caller's trained models, in vLLM's card form.
 * Base models carry what the engine reports (`root`, `max_model_len`) and `parent: null`. Each trained
 * model is listed by its bare name (its latest checkpoint, or its base model before the first one)
 * and by each checkpoint's `:stepN` name, with `parent` its base model and `root` its own name (never
 * the engine's adapter name or the weights' path).
 */
export async function listModels(db: Kysely<Database>, registry: BackendRegistry, principal: Principal): Promise<ModelList> {
  const [served, checkpoints] = await Promise.all([registry.list(), listCheckpoints(db, { entities: [...principal.entities] })]);
  // `owned_by` is vLLM's own value for base models: the backend's name is the operator's, not the tenant's.
  const data: Model[] = served.map((m) => card(m.id, m.created, 'vllm', m.root, null, m.maxModelLen));
  const contextOf = new Map(served.map((m) => [m.id, m.maxModelLen]));
  let previous = '';
  for (const row of checkpoints) {
    const name = `${row.entity}/${row.project}/${row.name}`;
    const maxModelLen = contextOf.get(row.baseModel) ?? null;
    if (name !== previous) {
      data.push(card(name, seconds(row.modelCreatedAt), row.entity, name, row.baseModel, maxModelLen));
      previous = name;
    }
    if (row.step !== null) {
      const id = `${name}:step${row.step}`;
      data.push(card(id, seconds(row.checkpointCreatedAt ?? row.modelCreatedAt), row.entity, id, row.baseModel, maxModelLen));
    }
  }
  return { object: 'list', data };
}

/**
 * GET /v1/models/{id}: one card of the list, or 404 model_not_found (the same for another tenant's model).
 * Every name chat completions take for a trained model finds its card (`:latest`, `:step08`,
 * `wandb-artifact:///…`, and `:step0` before any checkpoint: the base model), answered with `id` as asked.
 */
export async function getModel(db: Kysely<Database>, registry: BackendRegistry, principal: Principal, id: string): Promise<Model> {
  const { data } = await listModels(db, registry, principal);
  const found = data.find((model) => model.id === id) ?? cardOfTrainedName(data, id);
  if (!found) {
    throw new NotFoundError('model', id, {
      code: 'model_not_found',
      param: 'model',
      message: `The model \`${id}\` does not exist or you do not have access to it.`,
    });
  }
  return found;
}

/** The card of a trained model's name in another of its forms, with `id` the name as asked; undefined for any other name. */
function cardOfTrainedName(data: Model[], id: string): Model | undefined {
  const ref = parseModelName(id);
  if (ref.kind !== 'checkpoint') return undefined;
  const bare = formatCheckpointName({ ...ref, step: 'latest' });
  const listed = data.find((model) => model.id === formatCheckpointName(ref)) ?? (ref.step === 0 ? data.find((model) => model.id === bare) : undefined);
  // A base model's own id never comes here (it was found as listed): a card found is a trained model's.
  return listed && listed.parent !== null ? { ...listed, id, permission: [permission(id, listed.created)] } : undefined;
}
