import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import { principalOf } from '../auth/plugin.js';
import type { DomainEventMap } from '../events.js';
import { adapterLoadObserver } from './adapter-loads.js';
import { loadBackendsFile } from './backends/config.js';
import { BackendRegistry } from './backends/registry.js';
import { ChatGateway } from './gateway.js';
import { getModel, listModels } from './models.js';
import { EngineError, EngineFault } from './proxy/errors.js';
import { ModelRouter } from './router.js';
import { inferenceRoutes } from './routes.js';
import { UsageService } from './usage/service.js';
import { UsageWriter } from './usage/writer.js';

/** How long shutdown waits for the requests cut at the end of the grace period to record their usage. */
const DRAIN_TIMEOUT_MS = 5_000;

/** The inference API's routes and background work; registered by src/app.ts. */
export const inferencePlugin: FastifyPluginAsyncZod<{ metrics: Registry }> = async (app, { metrics }) => {
  const { config } = app;
  // A broken backends file stops the server at start, naming the file and field.
  const backends = config.backendsFile ? await loadBackendsFile(config.backendsFile, config.env) : [];
  if (backends.length === 0) app.log.info('no inference backend configured (BACKENDS_FILE): chat completions answer 404 until one is');

  const registry = new BackendRegistry(backends, app.log, {
    client: {
      onAdapterLoad: adapterLoadObserver(app.log, metrics),
      // Discovery (every 60 s) lists what each engine holds: adapters of deleted checkpoints are unloaded.
      onAdaptersListed: (client, replica, names) => router.adaptersListed(client, replica, names),
    },
  });
  const router = new ModelRouter(app.db, registry, app.log, { trainableBaseModels: config.trainableBaseModels });
  const writer = new UsageWriter(app.db, app.log, { flushIntervalMs: config.usageFlushIntervalMs, embedded: app.database.embedded });
  const gateway = new ChatGateway(router, writer, { keepAliveMs: config.sseKeepAliveMs, log: app.log });
  const usage = new UsageService(app.db, writer);

  const onCheckpointsDeleted = (event: DomainEventMap['checkpoints-deleted'][0]) => router.checkpointsDeleted(event);
  app.events.on('checkpoints-deleted', onCheckpointsDeleted);
  const onCheckpointLanded = () => router.checkpointLanded();
  app.events.on('checkpoint-landed', onCheckpointLanded);
  registry.start();

  app.addHook('onClose', async () => {
    app.events.off('checkpoints-deleted', onCheckpointsDeleted);
    app.events.off('checkpoint-landed', onCheckpointLanded);
    // The server has closed: connections still open at the end of the grace period were cut, and
    // their streams end now. Each is metered before the writer's last flush.
    await gateway.drained(DRAIN_TIMEOUT_MS);
    await writer.close();
    await router.close();
    await registry.close();
  });

  // An engine's Retry-After reaches the client, so that the openai SDKs wait as the engine asked; the
  // gateway's own 503s (engine unreachable, every replica resting) say how long to wait too.
  app.addHook('onError', async (_request, reply, error) => {
    if ((error instanceof EngineError || error instanceof EngineFault) && error.retryAfterMs !== undefined) {
      reply.header('retry-after', String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))));
      reply.header('retry-after-ms', String(error.retryAfterMs));
    }
  });

  await app.register(inferenceRoutes, {
    gateway,
    usage,
    listModels: (request) => listModels(app.db, registry, principalOf(request)),
    getModel: (request, id) => getModel(app.db, registry, principalOf(request), id),
  });
};
