import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Logger } from './logger.js';
import type { Principal } from '../auth/principal.js';
import type { Database } from '../db/schema.js';
import { NotFoundError } from '../errors.js';
import type { DomainEventMap } from '../events.js';
import { adapterPathFor } from './backends/config.js';
import type { BackendRegistry } from './backends/registry.js';
import { checkpointExists, checkpointsOfNamedModels, findCheckpoint, findTrainedModel, MAX_STEP, type NamedModel } from './checkpoints.js';
import { NAME_SEGMENT, parseModelName, type CheckpointRef } from './model-name.js';
import type { BackendClient } from './proxy/client.js';
import type { AdapterSpec } from './proxy/adapters.js';
import { upstreamUnreachable } from './proxy/errors.js';
import type { Replica } from './proxy/replica.js';

/** Where a chat completion goes. */
export interface Route {
  backend: BackendClient;
  /** The `model` sent to the engine: the base model's name, or the adapter's. */
  engineModel: string;
  baseModel: string;
  adapter?: AdapterSpec;
  /** Rollouts of trainable models carry token ids and logprobs for the trainer. */
  trainable: boolean;
  /**
   * The trained model the client named, the checkpoint step serving it (null: none yet, base model), and
   * whether the client named no step (its latest checkpoint).
   */
  trained?: { name: string; step: number | null; latest: boolean };
}

export interface RouterOptions {
  trainableBaseModels: readonly string[];
  /** How long a resolved checkpoint route is reused (per key and model id). */
  cacheTtlMs?: number;
  now?: () => number;
}

const CACHE_LIMIT = 10_000;
/** The longest a deletion waits for an engine replica's list of the adapters it holds. */
const ENGINE_LIST_TIMEOUT_MS = 10_000;

/**
 * The engine-side name of a checkpoint's adapter: `entity/project/name:stepN@<hash of the checkpoint
 * id>`, readable in engine logs, and never the name of another checkpoint, so that a model re-created
 * under a deleted one's name cannot be served the deleted weights still loaded in an engine.
 */
export function adapterName(ref: { entity: string; project: string; model: string }, step: number, checkpointId: string): string {
  return `${checkpointPrefix(ref, step)}@${createHash('sha256').update(checkpointId).digest('hex').slice(0, 12)}`;
}

/** What adapter names of a checkpoint start with; derivable from a deletion event. */
function checkpointPrefix(ref: { entity: string; project: string; model: string }, step: number): string {
  return `${ref.entity}/${ref.project}/${ref.model}:step${step}`;
}

const SEGMENT = NAME_SEGMENT.source.slice(1, -1);
/** An adapter name as `adapterName` makes them: entity, project, model, step, hash. */
const ADAPTER_NAME = new RegExp(`^(${SEGMENT})/(${SEGMENT})/(${SEGMENT}):step(0|[1-9][0-9]*)@[0-9a-f]{12}$`);

/** Whether an engine's model id is the adapter of one of these steps (this naming or the earlier one, without `@`). */
function isAdapterOf(name: string, prefixes: ReadonlySet<string>): boolean {
  const at = name.lastIndexOf('@');
  return prefixes.has(name) || (at !== -1 && prefixes.has(name.slice(0, at)));
}

/**
 * Model id → backend and adapter. Base models are looked up in memory. Trained checkpoints are read
 * from the training tables, scoped to the caller's entities, and cached briefly per key so a rollout
 * loop costs no query per request; a new checkpoint is `latest` at once in the process it landed in, and
 * within the TTL in others.
 */
export class ModelRouter {
  private readonly cache = new Map<string, { expiresAt: number; route: Promise<Route> }>();
  private readonly trainableBases: ReadonlySet<string>;
  private readonly ttlMs: number;
  private readonly now: () => number;
  /** Unloads started by deletion events and discovery, for tests and shutdown to wait on. */
  private unloading: Promise<void> = Promise.resolve();
  /** Shutting down: what discovery lists from now on is left for the other processes to sweep. */
  private closing = false;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly registry: BackendRegistry,
    private readonly log: Logger,
    options: RouterOptions,
  ) {
    this.trainableBases = new Set(options.trainableBaseModels);
    this.ttlMs = options.cacheTtlMs ?? 1_000;
    this.now = options.now ?? Date.now;
  }

  /**
   * Resolves a model id for this caller, or throws 404 model_not_found without saying whether another
   * tenant has it (503 upstream_unreachable instead while engines that may serve it have not come up).
   */
  resolve(principal: Principal, modelId: string): Promise<Route> {
    const served = this.registry.lookup(modelId);
    if (served) return Promise.resolve(this.baseRoute(served.backend, modelId));

    const key = `${principal.keyId}\n${modelId}`;
    const now = this.now();
    const cached = this.cache.get(key);
    if (cached && cached.expiresAt > now) return cached.route;

    const route = this.resolveSlow(principal, modelId);
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    // Concurrent first requests share one lookup; a failure is not remembered.
    this.cache.set(key, { expiresAt: now + this.ttlMs, route });
    route.catch(() => {
      if (this.cache.get(key)?.route === route) this.cache.delete(key);
    });
    return route;
  }

  /**
   * Training registered a checkpoint: forget routes, so that a request made once the client has seen the
   * job complete is routed to it (`latest`) rather than to a route cached before it landed. Another server
   * process sharing the database sees it within the TTL.
   */
  checkpointLanded(): void {
    this.cache.clear();
  }

  /**
   * Training deleted checkpoints (or a whole model): forget routes and unload their adapters from the engines.
   * What each replica holds is read from the engine itself as well as from this process's own record, so
   * that an adapter another server process loaded (sharing the engine) is unloaded too.
   */
  checkpointsDeleted(event: DomainEventMap['checkpoints-deleted'][0]): void {
    const prefixes = new Set(event.steps.map((step) => checkpointPrefix(event, step)));
    const deleted = (name: string) => isAdapterOf(name, prefixes);
    // The deleted checkpoints' own adapters are refused from now on: a request routed before the delete
    // (waiting for a retry) would otherwise load one back after its unload.
    this.retire(event.ids.map((id, i) => adapterName(event, event.steps[i], id)));
    const work = Promise.all(
      this.registry.clients
        .filter((client) => client.backend.runtimeLora)
        .flatMap((client) =>
          client.replicas.map(async (replica) => {
            const names = new Set(client.adapters.namesOn(replica, deleted));
            try {
              const listed = await client.listModels(replica, Math.min(ENGINE_LIST_TIMEOUT_MS, client.backend.timeouts.firstByteMs));
              for (const { id } of listed) if (deleted(id)) names.add(id);
            } catch (error) {
              this.log.warn({ err: error, backend: client.backend.name, replica: replica.url }, 'could not read which adapters an engine replica holds; unloading those this process knows of');
            }
            for (const name of names) {
              try {
                await client.adapters.unload([replica], name);
              } catch (error) {
                this.log.warn({ err: error, adapter: name, backend: client.backend.name }, 'could not unload a deleted checkpoint\'s adapter');
              }
            }
          }),
        ),
    ).then(() => undefined);
    this.unloading = this.unloading.then(() => work);
  }

  /**
   * Discovery read the adapters a replica holds. Those named as trainyard names them, after a model of
   * this database, whose checkpoint no longer exists are unloaded: a process that deletes a checkpoint
   * unloads its adapter at once, and this catches what that could not (a process that died between its
   * delete and the unload; a load that raced the delete and could not unload after itself). Adapters of
   * models this database never had (an operator's, another deployment's) are left alone.
   */
  adaptersListed(client: BackendClient, replica: Replica, names: readonly string[]): void {
    if (this.closing) return;
    const work = this.unloadOrphans(client, replica, names).catch((error: unknown) => {
      this.log.warn({ err: error, backend: client.backend.name, replica: replica.url }, 'could not look for adapters of deleted checkpoints on an engine replica');
    });
    this.unloading = this.unloading.then(() => work);
  }

  /** Resolves when the unloads started so far have finished. */
  settled(): Promise<void> {
    return this.unloading;
  }

  /** Starts no more discovery sweeps (the engines' clients close next) and waits for the unloads started. */
  close(): Promise<void> {
    this.closing = true;
    return this.unloading;
  }

  /** Adapters of deleted checkpoints: refused by every backend from now on, and no cached route leads to one. */
  private retire(names: readonly string[]): void {
    this.cache.clear();
    for (const client of this.registry.clients) client.adapters.retire(names);
  }

  private async unloadOrphans(client: BackendClient, replica: Replica, names: readonly string[]): Promise<void> {
    const candidates = names.flatMap((name) => {
      const match = ADAPTER_NAME.exec(name);
      const step = Number(match?.[4]);
      return match && step <= MAX_STEP ? [{ name, model: `${match[1]}/${match[2]}/${match[3]}`, step }] : [];
    });
    if (candidates.length === 0) return;
    const models = new Map<string, NamedModel>();
    for (const { model } of candidates) {
      const [entity, project, name] = model.split('/');
      models.set(model, { entity, project, name });
    }
    const rows = await checkpointsOfNamedModels(this.db, { models: [...models.values()], steps: [...new Set(candidates.map((c) => c.step))] });
    const known = new Set(rows.map((row) => `${row.entity}/${row.project}/${row.name}`));
    const live = new Set(rows.flatMap((row) => (row.checkpoint ? [adapterName({ ...row, model: row.name }, row.checkpoint.step, row.checkpoint.id)] : [])));
    const orphans = candidates.filter((c) => known.has(c.model) && !live.has(c.name)).map((c) => c.name);
    if (orphans.length === 0) return;
    this.retire(orphans);
    for (const name of orphans) {
      try {
        await client.adapters.unload([replica], name);
        this.log.info({ adapter: name, backend: client.backend.name, replica: replica.url }, 'unloaded the adapter of a deleted checkpoint that an engine still held');
      } catch (error) {
        this.log.warn({ err: error, adapter: name, backend: client.backend.name }, 'could not unload a deleted checkpoint\'s adapter');
      }
    }
  }

  /**
   * Whether a checkpoint a route was read for still exists, asked before its adapter is loaded and after:
   * another server process may have deleted it (and unloaded the adapter) without this one hearing of it.
   * A deleted one drops the cached routes, so that a request for `latest` that follows it (the gateway
   * routes it again) finds the checkpoint that is latest now. When the database cannot answer, the load
   * goes on as it would without the check; the discovery sweep still unloads it if the checkpoint is gone.
   */
  private async stillExists(modelId: string, checkpointId: string): Promise<boolean> {
    try {
      if (await checkpointExists(this.db, { modelId, checkpointId })) return true;
    } catch (error) {
      this.log.warn({ err: error, checkpoint: checkpointId }, 'could not check that a checkpoint still exists before or after loading its adapter');
      return true;
    }
    this.cache.clear();
    return false;
  }

  private baseRoute(backend: BackendClient, name: string): Route {
    return { backend, engineModel: name, baseModel: name, trainable: this.trainableBases.has(name) };
  }

  private async resolveSlow(principal: Principal, modelId: string): Promise<Route> {
    if (!this.registry.configured) {
      throw modelNotFound(
        modelId,
        `No inference backend is configured, so the model \`${modelId}\` cannot be served. Set BACKENDS_FILE to a JSON or YAML file listing your engines (see docs/inference.md).`,
      );
    }
    const ref = parseModelName(modelId);
    if (ref.kind === 'invalid') throw modelNotFound(modelId, `${ref.reason}.`);
    if (ref.kind === 'base') {
      const served = await this.registry.find(ref.name);
      if (!served) throw this.notServed(ref.name, modelNotFound(modelId));
      return this.baseRoute(served.backend, ref.name);
    }
    // Engines may serve base models whose names look like entity/project/name: resolve() has looked
    // the name up in memory already; discovery is refreshed in the background, never awaited here.
    this.registry.refreshSoon();
    return this.checkpointRoute(principal, modelId, ref);
  }

  /**
   * Why no backend serves this base model: `notFound`, unless a backend that discovers its models has
   * never had a replica answer (its engines still starting), which may serve it once they are up. Then
   * it is 503 upstream_unreachable with Retry-After, as for an engine that stopped answering.
   */
  private notServed(baseModel: string, notFound: NotFoundError): Error {
    const unanswered = this.registry.unanswered();
    if (unanswered.length === 0) return notFound;
    const names = unanswered.map((client) => client.backend.name).join(', ');
    return upstreamUnreachable(`no replica of backend ${names} has answered /v1/models yet, so whether ${baseModel} is served is not known`);
  }

  private async checkpointRoute(principal: Principal, modelId: string, ref: CheckpointRef): Promise<Route> {
    if (!principal.entities.has(ref.entity)) throw modelNotFound(modelId);
    const model = await findTrainedModel(this.db, { entity: ref.entity, project: ref.project, name: ref.model });
    if (!model) throw modelNotFound(modelId);
    const name = `${model.entity}/${model.project}/${model.name}`;

    const served = await this.registry.find(model.baseModel);
    if (!served) {
      throw this.notServed(model.baseModel, modelNotFound(modelId, `The base model \`${model.baseModel}\` of ${name} is not served by any configured backend.`));
    }
    const checkpoint = await findCheckpoint(this.db, { modelId: model.id, step: ref.step });
    if (!checkpoint) {
      // Step 0 is the policy before any training: the base model, which `latest` also is with no checkpoint
      // yet (a client that pins the step it started from, as ART's pipeline trainer does, names `:step0`).
      if (ref.step !== 'latest' && ref.step !== 0) throw modelNotFound(modelId, `The model ${name} has no checkpoint at step ${ref.step}.`);
      return { ...this.baseRoute(served.backend, model.baseModel), trainable: true, trained: { name, step: null, latest: ref.step === 'latest' } };
    }
    const backend = served.backend;
    if (!backend.backend.runtimeLora) {
      // The fix is the operator's: the log names the backend, the tenant reads no engine topology.
      this.log.warn(
        { backend: backend.backend.name, model: modelId },
        'a checkpoint was asked for, but its backend cannot load adapters: set runtime_lora: true for it in the backends file and start its engines with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True',
      );
      throw modelNotFound(modelId, `The checkpoints of ${name} cannot be served: the engines serving its base model do not load adapters at run time (the server log says how to enable it).`);
    }
    const engineModel = adapterName(ref, checkpoint.step, checkpoint.id);
    return {
      backend,
      engineModel,
      baseModel: model.baseModel,
      adapter: {
        name: engineModel,
        path: adapterPathFor(backend.backend, checkpoint.uri),
        checkpoint: `${name}:step${checkpoint.step}`,
        exists: () => this.stillExists(model.id, checkpoint.id),
      },
      trainable: true,
      trained: { name, step: checkpoint.step, latest: ref.step === 'latest' },
    };
  }
}

/** OpenAI's wording; the same for a model that does not exist and one the caller cannot reach. */
function modelNotFound(modelId: string, message?: string): NotFoundError {
  return new NotFoundError('model', modelId, {
    code: 'model_not_found',
    param: 'model',
    message: message ?? `The model \`${modelId}\` does not exist or you do not have access to it.`,
  });
}
