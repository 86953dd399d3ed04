import type { CancelSignal } from './cancel.js';
import { engineErrorDetails, EngineFault, failureCode, RequestAbortedError, RetiredAdapterError, upstreamUnauthorized } from './errors.js';
import { isConnectError, isTimeoutError, type Replica } from './replica.js';

/** Deleted checkpoints' adapter names kept refused; a request that waited past this many deletions is rare. */
const RETIRED_KEPT = 100_000;

export interface AdapterSpec {
  /** The name the engine serves it under (the `model` of requests that use it). */
  name: string;
  /** Where the engine reads the adapter's weights. */
  path: string;
  /** The checkpoint as its owner names it (`entity/project/model:stepN`), for error messages; default `name`. */
  checkpoint?: string;
  /**
   * Whether the checkpoint still exists. Another trainyard process sharing the database and the engine may
   * delete it (and unload its adapter) without this one hearing of it, so it is asked before every load
   * and again once the load has finished; absent, the checkpoint always exists.
   */
  exists?: () => Promise<boolean>;
}

/** One load of an adapter into one replica, as the loader's observer hears of it. */
export interface AdapterLoadRecord {
  backend: string;
  replica: string;
  adapter: AdapterSpec;
  /** The replica had this adapter loaded before and lost it (the engine restarted, or someone unloaded it). */
  reload: boolean;
  outcome: 'loaded' | 'failed';
  ms: number;
  /** Why a failed load failed, with the engine's message (it may name the path: for the log only). */
  error?: Error;
}

/** What the loader tells its owner. */
export interface AdapterLoaderHooks {
  /** Every load, successful or not (logging and metrics). */
  observe?: (record: AdapterLoadRecord) => void;
  /** The adapters a replica's /v1/models listed (`markLoaded`). */
  listed?: (replica: Replica, names: readonly string[]) => void;
}

/**
 * Loads LoRA adapters into engines at runtime, exactly once per replica and adapter: concurrent first
 * requests share one in-flight load. A failed load is forgotten so that the next request tries again.
 * Engines keep adapters in memory only, so after a restart `forget` (or `sync`) must be told.
 */
export class AdapterLoader {
  private readonly loads = new Map<string, Promise<void>>();
  /** Replica and adapter pairs loaded successfully at least once and not unloaded since: a new load of one is a reload. */
  private readonly loadedBefore = new Set<string>();
  /** Adapters of deleted checkpoints, the newest RETIRED_KEPT: no request loads one again. */
  private readonly retired = new Set<string>();

  private readonly backendName: string;

  constructor(
    private readonly backend: { name: string; apiKeyEnv?: string },
    private readonly headers: Record<string, string>,
    private readonly timeoutMs: number,
    private readonly hooks: AdapterLoaderHooks = {},
  ) {
    this.backendName = backend.name;
  }

  /**
   * The adapter's load on the replica, started unless one is in flight or done: resolves once it is
   * loaded. Concurrent callers get the same promise (wait on it with `raceAbort`, so that a caller's
   * abort stops only its own wait), which `forget` compares against.
   */
  ensureLoaded(replica: Replica, adapter: AdapterSpec): Promise<void> {
    if (this.retired.has(adapter.name)) {
      // A request whose route was read before its checkpoint was deleted (waiting to retry, say): the
      // checkpoint is gone, and loading its adapter now would put it back on the engine after the unload.
      return Promise.reject(retiredError(adapter));
    }
    const key = keyOf(replica, adapter.name);
    let load = this.loads.get(key);
    if (!load) {
      load = this.timedLoad(replica, adapter, key);
      this.loads.set(key, load);
      load.catch(() => this.loads.delete(key));
    }
    return load;
  }

  isLoaded(replica: Replica, name: string): boolean {
    return this.loads.has(keyOf(replica, name));
  }

  /** Names of the adapters known on a replica (loaded, loading, or listed by the engine) that pass `test`. */
  namesOn(replica: Replica, test: (name: string) => boolean): string[] {
    const prefix = `${replica.url}\n`;
    const names: string[] = [];
    for (const key of this.loads.keys()) {
      if (key.startsWith(prefix) && test(key.slice(prefix.length))) names.push(key.slice(prefix.length));
    }
    return names;
  }

  /** Records adapters an engine already serves (read from its /v1/models), so they are not reloaded. */
  markLoaded(replica: Replica, names: readonly string[]): void {
    for (const name of names) this.loads.set(keyOf(replica, name), Promise.resolve());
    this.hooks.listed?.(replica, names);
  }

  /**
   * Drops what is known about one adapter on one replica (the engine restarted or lost it). Given the
   * load a request waited on, only while that is still the one known: a reload another request has
   * started since is kept, so that the requests that met one restart share one reload.
   */
  forget(replica: Replica, name: string, load?: Promise<void>): void {
    const key = keyOf(replica, name);
    if (load === undefined || this.loads.get(key) === load) this.loads.delete(key);
  }

  /** The adapters of deleted checkpoints: refused from now on (`ensureLoaded`), before they are unloaded. */
  retire(names: readonly string[]): void {
    for (const name of names) {
      this.retired.delete(name);
      this.retired.add(name);
    }
    for (const name of this.retired) {
      if (this.retired.size <= RETIRED_KEPT) break;
      this.retired.delete(name);
    }
  }

  /**
   * Unloads an adapter from every replica; one the engine does not know counts as unloaded. A load
   * still in flight is waited for first, so that it cannot land on the engine after the unload.
   */
  async unload(replicas: readonly Replica[], name: string): Promise<void> {
    await Promise.all(
      replicas.map(async (replica) => {
        await this.loads.get(keyOf(replica, name))?.catch(() => undefined);
        this.forget(replica, name);
        this.loadedBefore.delete(keyOf(replica, name));
        await this.unloadFrom(replica, name);
      }),
    );
  }

  private async unloadFrom(replica: Replica, name: string): Promise<void> {
    const response = await replica.control({
      method: 'POST',
      path: '/v1/unload_lora_adapter',
      body: { lora_name: name },
      headers: this.headers,
      timeoutMs: this.timeoutMs,
    });
    if (response.status >= 400 && response.status !== 404) {
      const { message } = engineErrorDetails(response.text, response.status);
      throw new EngineFault(502, 'upstream_error', message, `replica ${replica.url} of backend ${this.backendName} could not unload adapter ${name}: ${message}`);
    }
  }

  /**
   * One load, between two looks at whether the checkpoint still exists. Another process that deletes it
   * unloads what the engine lists once its delete has committed: a load finishing after that listing is
   * not seen there, but its look afterwards sees the delete, and unloads what it loaded.
   */
  private async timedLoad(replica: Replica, adapter: AdapterSpec, key: string): Promise<void> {
    if (await this.checkpointGone(adapter)) throw retiredError(adapter);
    const reload = this.loadedBefore.has(key);
    const started = performance.now();
    const record = (outcome: AdapterLoadRecord['outcome'], error?: Error) =>
      this.hooks.observe?.({ backend: this.backendName, replica: replica.url, adapter, reload, outcome, ms: performance.now() - started, error });
    try {
      await this.load(replica, adapter);
    } catch (error) {
      record('failed', error as Error);
      // The engine may have refused because the delete removed the files (an imported checkpoint's).
      if (error instanceof EngineFault && (await this.checkpointGone(adapter))) throw retiredError(adapter);
      throw error;
    }
    record('loaded');
    if (await this.checkpointGone(adapter)) {
      // Best effort: the discovery sweep (ModelRouter) unloads what is left of a deleted checkpoint.
      await this.unloadFrom(replica, adapter.name).catch(() => undefined);
      throw retiredError(adapter);
    }
    this.loadedBefore.add(key);
  }

  /** Whether the adapter's checkpoint is gone; a gone one is retired here. */
  private async checkpointGone(adapter: AdapterSpec): Promise<boolean> {
    if (!adapter.exists || (await adapter.exists())) return false;
    this.retire([adapter.name]);
    return true;
  }

  private async load(replica: Replica, adapter: AdapterSpec): Promise<void> {
    const what = `replica ${replica.url} of backend ${this.backendName}`;
    const checkpoint = adapter.checkpoint ?? adapter.name;
    let response;
    try {
      response = await replica.control({
        method: 'POST',
        path: '/v1/load_lora_adapter',
        body: { lora_name: adapter.name, lora_path: adapter.path },
        headers: this.headers,
        timeoutMs: this.timeoutMs,
      });
    } catch (error) {
      // A connect error goes back as is: the client tries another replica.
      if (isConnectError(error)) throw error;
      if (isTimeoutError(error)) {
        throw new EngineFault(
          504,
          'adapter_load_failed',
          `The engine did not load the weights of checkpoint ${checkpoint} within the adapter load timeout of ${this.timeoutMs} ms.`,
          `${what} did not load adapter ${adapter.name} from ${adapter.path} within the adapter load timeout of ${this.timeoutMs} ms`,
        );
      }
      const reason = (error as Error).message;
      throw new EngineFault(
        502,
        'adapter_load_failed',
        `The engine failed while loading the weights of checkpoint ${checkpoint}: ${failureCode(error)}`,
        `${what} failed while loading adapter ${adapter.name} from ${adapter.path}: ${reason}`,
      );
    }
    if (response.status < 400) return;
    const { message } = engineErrorDetails(response.text, response.status);
    if (response.status === 401 || response.status === 403) throw upstreamUnauthorized(this.backend, replica.url, response.status, message);
    // Another gateway process sharing this engine may have loaded it first.
    if (response.status === 400 && /already been loaded/i.test(message)) return;
    // The engine's message names the adapter's path, which is the operator's business, not the tenant's.
    throw new EngineFault(
      502,
      'adapter_load_failed',
      `The engine could not load the weights of checkpoint ${checkpoint} (it answered ${response.status}); the server log has the engine's message.`,
      `${what} could not load adapter ${adapter.name} from ${adapter.path} (engine answered ${response.status}): ${message}`,
    );
  }
}

/** The 404 of a deleted checkpoint's adapter; the gateway routes a request for `latest` again on it. */
function retiredError(adapter: AdapterSpec): RetiredAdapterError {
  const checkpoint = adapter.checkpoint ?? adapter.name;
  return new RetiredAdapterError(404, `The model \`${checkpoint}\` does not exist or you do not have access to it.`, { param: 'model' });
}

function keyOf(replica: Replica, name: string): string {
  return `${replica.url}\n${name}`;
}

/** The promise's outcome, or a RequestAbortedError as soon as the signal fires (the promise goes on). */
export function raceAbort<T>(promise: Promise<T>, signal: CancelSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new RequestAbortedError());
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new RequestAbortedError());
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * An engine's message names the model it was sent, which for a checkpoint is the adapter's engine name
 * (`entity/project/name:stepN@<hash>`): the client reads the checkpoint's own name in its place.
 */
export function withCheckpointName(message: string, adapterName: string): string {
  return message.includes(adapterName) ? message.split(adapterName).join(adapterName.replace(/@[0-9a-f]+$/, '')) : message;
}
