import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { registerJsonBodyParser } from '../http/json-body.js';
import { resolveTrainingRows } from '../tracing/datasets.js';
import { JobSignal } from './job-signal.js';
import { previewRoutes } from './routes.js';
import { TrainingService } from './service.js';
import { SftDataResolver } from './sft-data.js';
import { LeaseSweeper } from './sweeper.js';
import { workerRoutes } from './worker-routes.js';
import { WorkerService } from './worker-service.js';

/**
 * The training API's routes and background work; registered by src/app.ts at the root. Owns the job
 * signal that wakes long-polling claims, the lease sweeper, and the cpu_queue / gpu_queue system checks.
 */
export const trainingPlugin: FastifyPluginAsyncZod = async (app) => {
  // Everything these routes are sent is stored in text or JSONB, which cannot hold U+0000: a 422 naming
  // the field instead of a database error. This plugin is encapsulated, so other APIs keep their parser.
  registerJsonBodyParser(app, { rejectNul: true });
  const db = app.db;
  const signal = new JobSignal();
  const sftData = new SftDataResolver({
    resolveTracingRows: (args) => resolveTrainingRows(db, args),
    readWandbArtifact: (principal, url) => app.wandb.datasetText(principal, url),
    allowHttpUrls: app.config.sftAllowHttpUrls,
    maxHttpBytes: app.config.bodyLimitBytes,
  });
  const service = new TrainingService({ db, config: app.config, events: app.events, signal, sftData });
  const workers = new WorkerService({ db, config: app.config, signal });
  const sweeper = new LeaseSweeper(() => workers.sweepExpiredLeases(), app.config.leaseSweepIntervalMs, app.log);

  app.systemChecks.register('cpu_queue', () => workers.queueCheck());
  app.systemChecks.register('gpu_queue', () => workers.workersCheck());

  await app.register(previewRoutes, { service });
  await app.register(workerRoutes, { workers });

  app.addHook('onReady', async () => sweeper.start());
  // preClose runs before the server stops waiting for in-flight requests: waiting claims answer 204 now
  // instead of holding the shutdown for up to 30 s, and no sweep runs on a closing database.
  app.addHook('preClose', async () => {
    signal.close();
    await sweeper.stop();
  });
};
