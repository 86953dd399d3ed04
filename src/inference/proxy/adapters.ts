import { UpstreamError } from '../../errors.js';
import type { CancelSignal } from './cancel.js';
import { engineErrorDetails, RequestAbortedError } from './errors.js';
import type { Replica } from './replica.js';

export interface AdapterSpec {
  /** The name the engine serves it under (the `model` of requests that use it). */
  name: string;
  /** Where the engine reads the adapter's weights. */
  path: string;
}

/**
 * Loads LoRA adapters into engines at runtime, exactly once per replica and adapter: concurrent first
 * requests share one in-flight load. A failed load is forgotten so that the next request tries again.
 * Engines keep adapters in memory only, so after a restart `forget` (or `sync`) must be told.
 */
export class AdapterLoader {
  private readonly loads = new Map<string, Promise<void>>();

  constructor(
    private readonly backendName: string,
    private readonly headers: Record<string, string>,
    private readonly timeoutMs: number,
  ) {}

  /** Resolves once the adapter is loaded on the replica; the caller's abort stops only its wait. */
  ensureLoaded(replica: Replica, adapter: AdapterSpec, signal?: CancelSignal): Promise<void> {
    const key = keyOf(replica, adapter.name);
    let load = this.loads.get(key);
    if (!load) {
      load = this.load(replica, adapter);
      this.loads.set(key, load);
      load.catch(() => this.loads.delete(key));
    }
    return signal ? raceAbort(load, signal) : load;
  }

  isLoaded(replica: Replica, name: string): boolean {
    return this.loads.has(keyOf(replica, name));
  }

  /** Records adapters an engine already serves (read from its /v1/models), so they are not reloaded. */
  markLoaded(replica: Replica, names: readonly string[]): void {
    for (const name of names) this.loads.set(keyOf(replica, name), Promise.resolve());
  }

  /** Drops what is known about one adapter on one replica (the engine restarted or lost it). */
  forget(replica: Replica, name: string): void {
    this.loads.delete(keyOf(replica, name));
  }

  /** Unloads an adapter from every replica; one the engine does not know counts as unloaded. */
  async unload(replicas: readonly Replica[], name: string): Promise<void> {
    await Promise.all(
      replicas.map(async (replica) => {
        this.forget(replica, name);
        const response = await replica.control({
          method: 'POST',
          path: '/v1/unload_lora_adapter',
          body: { lora_name: name },
          headers: this.headers,
          timeoutMs: this.timeoutMs,
        });
        if (response.status >= 400 && response.status !== 404) {
          const { message } = engineErrorDetails(response.text, response.status);
          throw new UpstreamError(`replica ${replica.url} of backend ${this.backendName} could not unload adapter ${name}: ${message}`);
        }
      }),
    );
  }

  private async load(replica: Replica, adapter: AdapterSpec): Promise<void> {
    const response = await replica.control({
      method: 'POST',
      path: '/v1/load_lora_adapter',
      body: { lora_name: adapter.name, lora_path: adapter.path },
      headers: this.headers,
      timeoutMs: this.timeoutMs,
    });
    if (response.status < 400) return;
    const { message } = engineErrorDetails(response.text, response.status);
    // Another gateway process sharing this engine may have loaded it first.
    if (response.status === 400 && /already been loaded/i.test(message)) return;
    throw new UpstreamError(
      `replica ${replica.url} of backend ${this.backendName} could not load adapter ${adapter.name} from ${adapter.path}: ${message}`,
      { code: 'adapter_load_failed' },
    );
  }
}

function keyOf(replica: Replica, name: string): string {
  return `${replica.url}\n${name}`;
}

function raceAbort<T>(promise: Promise<T>, signal: CancelSignal): Promise<T> {
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
