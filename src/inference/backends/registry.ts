import type { Logger } from '../logger.js';
import { isAdapterShaped } from '../model-name.js';
import { BackendClient, type ClientOptions } from '../proxy/client.js';
import type { BackendConfig } from './config.js';

/** A base model an engine serves, and the backend that serves it. */
export interface ServedModel {
  id: string;
  /** What the engine reports as the model's root (its weights' path), or the id. */
  root: string;
  /** The context length the engine reports (vLLM's max_model_len), null until an engine has said. */
  maxModelLen: number | null;
  backend: BackendClient;
  /** Unix seconds: when this process first saw it served. */
  created: number;
}

export interface RegistryOptions {
  /** How often backends with `models: discover` re-read their replicas' /v1/models. */
  refreshMs?: number;
  /** A lookup of an unknown model re-reads the replicas at most this often. */
  missRefreshMs?: number;
  client?: ClientOptions;
}

/** What an engine's /v1/models says of a base model. */
interface EngineCard {
  root: string;
  maxModelLen: number | null;
}

/** Discovery is off the request path, so it gets a bound of its own rather than the generation timeouts. */
const DISCOVERY_TIMEOUT_MS = 10_000;

/**
 * The configured backends and the base models they serve: listed in the backends file, or discovered
 * from the replicas' /v1/models at start and refreshed. Discovery also tells each backend's adapter
 * loader which adapters its engines already hold (loaded by another trainyard process, say).
 */
export class BackendRegistry {
  readonly clients: readonly BackendClient[];
  private served = new Map<string, ServedModel>();
  private discovering: Promise<void> | undefined;
  private firstDiscovery: Promise<void> | undefined;
  private lastDiscoveryAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly refreshMs: number;
  private readonly missRefreshMs: number;
  private readonly seenAt = new Map<string, number>();
  /** Backends a replica of which has answered /v1/models at least once. */
  private readonly answered = new Set<BackendClient>();

  constructor(
    backends: readonly BackendConfig[],
    private readonly log: Logger,
    options: RegistryOptions = {},
  ) {
    this.clients = backends.map((backend) => new BackendClient(backend, options.client));
    this.refreshMs = options.refreshMs ?? 60_000;
    this.missRefreshMs = options.missRefreshMs ?? 5_000;
    this.rebuild(new Map());
  }

  get configured(): boolean {
    return this.clients.length > 0;
  }

  /** Starts discovery in the background; the server does not wait for engines to come up. */
  start(): void {
    // Every backend is read: listed models get the engine's card details (root, context length) too.
    if (this.clients.length === 0) return;
    this.firstDiscovery = this.discover();
    this.timer = setInterval(() => void this.discover(), this.refreshMs);
    this.timer.unref();
  }

  /** The served base model of that name, without waiting. */
  lookup(id: string): ServedModel | undefined {
    return this.served.get(id);
  }

  /** The served base model of that name; an unknown name re-reads discovering backends first (throttled). */
  async find(id: string): Promise<ServedModel | undefined> {
    const known = this.served.get(id);
    if (known || !this.discovers()) return known;
    if (this.firstDiscovery) await this.firstDiscovery;
    if (!this.served.has(id) && Date.now() - this.lastDiscoveryAt >= this.missRefreshMs) await this.discover();
    return this.served.get(id);
  }

  /** Starts a re-read of the discovering backends in the background, at most every missRefreshMs. */
  refreshSoon(): void {
    if (!this.discovers() || this.discovering || Date.now() - this.lastDiscoveryAt < this.missRefreshMs) return;
    void this.discover().catch(() => undefined);
  }

  /**
   * Backends with `models: discover` none of whose replicas has ever answered /v1/models: their engines
   * may still be starting (loading weights takes minutes), so any name may turn out to be theirs.
   */
  unanswered(): BackendClient[] {
    return this.clients.filter((client) => client.backend.models === 'discover' && !this.answered.has(client));
  }

  /** Every served base model, after the first discovery has finished. */
  async list(): Promise<ServedModel[]> {
    if (this.firstDiscovery) await this.firstDiscovery;
    return [...this.served.values()];
  }

  /** Re-reads the replicas' model lists; concurrent callers share one pass. */
  discover(): Promise<void> {
    this.discovering ??= this.discoverAll().finally(() => {
      this.discovering = undefined;
      this.lastDiscoveryAt = Date.now();
    });
    return this.discovering;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.discovering?.catch(() => undefined);
    await Promise.all(this.clients.map((client) => client.close()));
  }

  private discovers(): boolean {
    return this.clients.some((client) => client.backend.models === 'discover');
  }

  private async discoverAll(): Promise<void> {
    const discovered = new Map<BackendClient, Map<string, EngineCard>>();
    await Promise.all(
      this.clients.map(async (client) => {
        const bases = new Map<string, EngineCard>();
        let answered = false;
        await Promise.all(
          client.replicas.map(async (replica) => {
            try {
              const models = await client.listModels(replica, Math.min(DISCOVERY_TIMEOUT_MS, client.backend.timeouts.firstByteMs));
              answered = true;
              // vLLM lists runtime-loaded adapters with their base model as `parent`; other engines may
              // list them without one, so checkpoint-shaped ids are adapters whatever they say.
              const isAdapter = (m: { id: string; parent?: string | null }) => Boolean(m.parent) || isAdapterShaped(m.id);
              const adapters = models.filter(isAdapter).map((m) => m.id);
              if (client.backend.runtimeLora) client.adapters.markLoaded(replica, adapters);
              for (const model of models) {
                if (isAdapter(model)) continue;
                const maxModelLen = typeof model.max_model_len === 'number' && Number.isSafeInteger(model.max_model_len) ? model.max_model_len : null;
                bases.set(model.id, { root: model.root ?? model.id, maxModelLen });
              }
            } catch (error) {
              this.log.warn({ err: error, backend: client.backend.name, replica: replica.url }, 'could not read the models of an engine replica');
            }
          }),
        );
        if (answered) {
          discovered.set(client, bases);
          this.answered.add(client);
        }
      }),
    );
    this.rebuild(discovered);
  }

  /** Served models in backends-file order: when two backends serve a name, the first one wins. */
  private rebuild(discovered: Map<BackendClient, Map<string, EngineCard>>): void {
    const now = Math.floor(Date.now() / 1000);
    const next = new Map<string, ServedModel>();
    for (const client of this.clients) {
      // A backend that did not answer this time keeps what it served (and reported) before.
      const before = new Map([...this.served.values()].filter((m) => m.backend === client).map((m) => [m.id, { root: m.root, maxModelLen: m.maxModelLen }]));
      const fresh = discovered.get(client);
      let models: Iterable<[string, EngineCard]>;
      if (client.backend.models !== 'discover') {
        // Listed in the backends file; what the engine reports about them (root, context length) is kept.
        models = client.backend.models.map((id) => [id, fresh?.get(id) ?? before.get(id) ?? { root: id, maxModelLen: null }]);
      } else {
        models = fresh ?? before;
      }
      for (const [id, card] of models) {
        if (next.has(id)) continue;
        const key = `${client.backend.name}\n${id}`;
        if (!this.seenAt.has(key)) this.seenAt.set(key, now);
        next.set(id, { id, root: card.root, maxModelLen: card.maxModelLen, backend: client, created: this.seenAt.get(key)! });
      }
    }
    this.served = next;
  }
}
