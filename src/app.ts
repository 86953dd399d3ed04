import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { LogController, type FastifyInstance, type FastifyRequest } from 'fastify';
import { jsonSchemaTransform, jsonSchemaTransformObject, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Kysely } from 'kysely';
import { adminRoutes } from './admin/routes.js';
import { registerAuth } from './auth/plugin.js';
import { AuthService } from './auth/service.js';
import type { Config } from './config.js';
import { migrateOrClose, openDatabase, pgliteDataPath, type Database, type DatabaseHandle } from './db/index.js';
import { EmbeddedBackups } from './db/backup.js';
import { EmbeddedMaintenance } from './db/maintenance.js';
import { DomainEvents } from './events.js';
import { SystemChecks } from './health/checks.js';
import { healthRoutes } from './health/routes.js';
import { graphqlPlugin } from './graphql/plugin.js';
import { answerClientError } from './http/client-errors.js';
import { registerErrorHandlers, sendFrameworkError, setCommonHeaders } from './http/error-handler.js';
import { documentErrorResponses } from './http/error-responses.js';
import { registerJsonBodyParser } from './http/json-body.js';
import { registerMetrics } from './http/metrics.js';
import { requestId } from './http/request-id.js';
import { MAX_PARAM_LENGTH } from './http/routes-at-path.js';
import { validatorCompiler } from './http/validation.js';
import { inferencePlugin } from './inference/plugin.js';
import { tracingPlugin } from './tracing/plugin.js';
import { trainingPlugin } from './training/plugin.js';
import { uiPlugin } from './ui/plugin.js';
import { wandbRoutes } from './wandb/routes.js';
import { WandbService } from './wandb/service.js';

declare module 'fastify' {
  interface FastifyInstance {
    config: Config;
    database: DatabaseHandle;
    db: Kysely<Database>;
    auth: AuthService;
    systemChecks: SystemChecks;
    backups: EmbeddedBackups;
    events: DomainEvents;
    wandb: WandbService;
  }
}

export type App = FastifyInstance;

export interface AppDeps {
  /** An open database (tests pass one made from a template); opened from config otherwise. The app closes it. */
  database?: DatabaseHandle;
  /** Where JSON log lines go (stdout unless given; tests read them). */
  logStream?: { write(line: string): void };
}

/**
 * A request as its access log lines show it: Fastify's default fields, with the capability token of a W&B
 * upload or download URL (`/wandb/<kind>/<token>`, which needs no key) left out, so logs grant nothing.
 */
function loggedRequest(request: FastifyRequest) {
  return {
    method: request.method,
    url: request.url.replace(/^(\/wandb\/[^/?]+\/)[^/?]+/, '$1<token>'),
    version: request.headers['accept-version'] as string | undefined,
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket ? request.socket.remotePort : undefined,
  };
}

/**
 * Node's server options that make REQUEST_TIMEOUT_SECONDS hold. Node times a request's head with
 * headersTimeout (60 s by default) and the whole request with requestTimeout, but when the first is the
 * longer it swaps the two, which would give a stalled body 60 s whatever the setting: the head's time is
 * kept within the request's. Node looks for requests past their time every connectionsCheckingInterval
 * (30 s by default): a tenth of the timeout, from 1 s to 30 s, so that a short one is kept to about its length.
 */
function receiveTimeouts(requestTimeoutMs: number): { requestTimeout: number; headersTimeout: number; connectionsCheckingInterval: number } {
  if (requestTimeoutMs === 0) return { requestTimeout: 0, headersTimeout: 60_000, connectionsCheckingInterval: 30_000 };
  return {
    requestTimeout: requestTimeoutMs,
    headersTimeout: Math.min(60_000, requestTimeoutMs),
    connectionsCheckingInterval: Math.min(30_000, Math.max(1_000, Math.round(requestTimeoutMs / 10))),
  };
}

/** Builds the whole app on a migrated database. Never listens: src/server.ts does. */
export async function buildApp(config: Config, deps: AppDeps = {}): Promise<App> {
  const database = await migrateOrClose(deps.database ?? (await openDatabase(config)));

  const app = Fastify({
    logger: { level: config.logLevel, serializers: { req: loggedRequest }, ...(deps.logStream ? { stream: deps.logStream } : {}) },
    requestIdHeader: false,
    logController: new LogController({ requestIdLogLabel: 'request_id' }),
    genReqId: requestId,
    bodyLimit: config.bodyLimitBytes,
    // The time a client has to send a whole request, head and body (REQUEST_TIMEOUT_SECONDS; Fastify's
    // default, 0, turns off Node's): a client that stalls mid-body would otherwise hold its buffered part
    // for as long as it likes. Node then answers 408 and closes the connection. Only receiving is timed:
    // a response (an SSE stream, a long-polled claim, a completion waiting for its first token) is not,
    // and no socket inactivity timeout (connectionTimeout) is set, for the same reason.
    requestTimeout: config.requestTimeoutMs,
    http: receiveTimeouts(config.requestTimeoutMs),
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // The router's refusals (malformed percent-encoding, a parameter over MAX_PARAM_LENGTH: 400, 414) in
    // the API's error form, with x-request-id, rather than Fastify's own body.
    frameworkErrors: sendFrameworkError,
    // Requests Node's HTTP parser refuses (a bad header line, two Content-Length headers, a stalled head).
    clientErrorHandler: answerClientError,
  }).withTypeProvider<ZodTypeProvider>();

  database.useLog(app.log);
  if (database.restoreCompleted) {
    app.log.warn({ pgdata: pgliteDataPath(config.dataDir), ...database.restoreCompleted }, 'completed a restore that was interrupted once its copy of the backup was whole');
  }
  app.decorate('config', config);
  app.decorate('database', database);
  app.decorate('db', database.db);
  app.decorate('auth', new AuthService(database.db, config.authCacheTtlMs));
  app.decorate('systemChecks', new SystemChecks(5_000));
  app.decorate(
    'backups',
    new EmbeddedBackups(database, { backupsDir: config.backupDir, adaptersDir: config.adaptersDir, keep: config.backupKeep, intervalMs: config.backupIntervalMs }),
  );
  app.systemChecks.holdDatabaseWith(() => app.backups.holdingSince);
  app.decorate('events', new DomainEvents());
  app.decorate('wandb', new WandbService(database.db, { maxFileBytes: config.bodyLimitBytes, adaptersDir: config.adaptersDir, archiveLimitBytes: config.adapterArchiveLimitBytes }));
  app.addHook('onClose', async () => database.close());
  // A backup under way copies the database's files: they are not closed under it.
  app.addHook('preClose', async () => {
    app.backups.stopSchedule();
    await app.backups.settled();
  });
  // Only with BACKUP_INTERVAL_HOURS, on an embedded database kept in files.
  app.addHook('onReady', async () => app.backups.schedule(app.log));
  // PostgreSQL servers vacuum and analyze their tables themselves (autovacuum); PGlite does not.
  if (database.kind === 'pglite') {
    const maintenance = new EmbeddedMaintenance(database.db, app.log, config.embeddedAnalyzeIntervalMs);
    app.addHook('onReady', async () => maintenance.start());
    app.addHook('preClose', async () => maintenance.stop());
  }

  app.setValidatorCompiler(validatorCompiler);
  // Response schemas document the API; responses are not re-validated on the way out (a drifted
  // response must not turn into a 500 for the client).
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  registerJsonBodyParser(app);
  registerErrorHandlers(app);
  app.addHook('onRequest', (request, reply, done) => {
    setCommonHeaders(request, reply);
    done();
  });
  const metrics = registerMetrics(app);
  registerAuth(app, app.auth);

  app.systemChecks.register('api', async () => undefined);
  app.systemChecks.register('database', async () => database.check(), { usesDatabase: true });
  // cpu_queue and gpu_queue are registered by the training plugin, which owns the job queue.

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'trainyard',
        version: '0.1.0',
        description:
          'Training API (/v1/preview, /v1/workers), OpenAI-compatible inference (/v1/chat/completions, /v1/models) and weave-compatible tracing (/traces).',
      },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key>' },
          basic: { type: 'http', scheme: 'basic', description: 'User name "api", password <API key> (weave SDKs)' },
        },
      },
      security: [{ bearer: [] }],
      tags: [
        { name: 'health', description: 'Liveness and component checks.' },
        { name: 'training', description: 'Models, checkpoints, trajectory logs, RL and SFT jobs and their events (docs/training.md).' },
        { name: 'workers', description: 'The trainer-worker protocol: worker keys only (docs/workers.md, docs/worker-runtime.md).' },
        { name: 'inference', description: 'OpenAI-compatible chat completions, models and usage (docs/inference.md).' },
        { name: 'tracing', description: 'The weave trace-server protocol under /traces (docs/tracing.md).' },
        { name: 'admin', description: 'Users, teams and API keys; admin keys only.' },
        { name: 'wandb', description: 'The W&B API subset the wandb SDK uses for runs and artifacts, beside POST /graphql (docs/training.md, "W&B API").' },
        { name: 'ui', description: 'The web UI\'s session: an API key exchanged for a cookie (docs/ui.md).' },
      ],
    },
    transform: jsonSchemaTransform,
    // Puts the named (registered) zod schemas into components.schemas, where the routes' $refs point.
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(async (docs) => {
    docs.addHook('onRoute', (route) => {
      route.config = { ...route.config, auth: 'none' };
    });
    await docs.register(swaggerUi, { routePrefix: '/docs' });
  });

  documentErrorResponses(app);
  await app.register(healthRoutes);
  app.get('/metrics', { config: { auth: 'none' }, schema: { hide: true } }, async (_request, reply) => {
    reply.type(metrics.contentType);
    return metrics.metrics();
  });
  await app.register(adminRoutes, { prefix: '/v1/admin' });
  await app.register(trainingPlugin);
  await app.register(inferencePlugin, { metrics });
  await app.register(tracingPlugin, { prefix: '/traces' });
  await app.register(graphqlPlugin, { wandb: app.wandb });
  await app.register(wandbRoutes, { wandb: app.wandb });
  await app.register(uiPlugin);

  return app;
}
