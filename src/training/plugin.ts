import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { resolveTrainingRows } from '../tracing/datasets.js';
import { registerTrainingJsonParser } from './exact-bodies.js';
import { JobEventStreams } from './event-stream.js';
import { JobSignal } from './job-signal.js';
import { previewRoutes } from './routes.js';
import { TrainingService } from './service.js';
import { SftDataResolver } from './sft-data.js';
import path from 'node:path';
import { AdapterService } from './adapter-service.js';
import { CheckpointReleaser } from './checkpoint-release.js';
import { LifecycleService } from './lifecycle-service.js';
import { lifecycleRoutes } from './lifecycle-routes.js';
import { releaseRoutes } from './release-routes.js';
import { Sweeper } from './sweeper.js';
import { workerRoutes } from './worker-routes.js';
import { WorkerService } from './worker-service.js';

/**
 * The training API's routes and background work; registered by src/app.ts at the root. Owns the job
 * signal that wakes long-polling claims, the lease and checkpoint expiry sweepers, and the cpu_queue / gpu_queue system checks.
 */
export const trainingPlugin: FastifyPluginAsyncZod = async (app) => {
  // Everything these routes are sent is stored in text or JSONB, which cannot hold U+0000: a 422 naming
  // the field instead of a database error; and integers beyond 2^53 are stored as sent (exact-bodies.ts).
  // This plugin is encapsulated, so other APIs keep their parser.
  registerTrainingJsonParser(app);
  const db = app.db;
  const signal = new JobSignal();
  // Wakes the training job event streams of this process; other processes' changes reach them by polling.
  const jobChanges = new JobSignal();
  const sftData = new SftDataResolver({
    resolveTracingRows: (args) => resolveTrainingRows(db, args),
    readWandbArtifact: (principal, url) => app.wandb.datasetBytes(principal, url),
    allowHttpUrls: app.config.sftAllowHttpUrls,
    maxHttpBytes: app.config.bodyLimitBytes,
  });
  const releaser = new CheckpointReleaser(db, app.events, path.resolve(app.config.adaptersDir), app.log);
  const service = new TrainingService({ db, config: app.config, releaser, signal, sftData, jobChanges });
  const lifecycle = new LifecycleService({ db, training: service, releaser });
  const workers = new WorkerService({
    db,
    config: app.config,
    signal,
    jobChanges,
    // After the complete committed: a failure is logged, and the next landing, sweep or apply catches up.
    currentPrincipal: (keyId) => app.auth.currentPrincipal(keyId),
    onCheckpointLanded: (modelId) => {
      app.events.emit('checkpoint-landed', { modelId });
      return lifecycle.checkpointLanded(modelId).catch((error: unknown) => app.log.error({ err: error, model_id: modelId }, 'checkpoint retention failed'));
    },
  });
  const leaseSweeper = new Sweeper(
    'lease sweep',
    async () => {
      for (const job of await workers.sweepExpiredLeases()) {
        app.log.warn({ job_id: job.id, status: job.status, attempt: job.attempt }, 'training job lease expired');
      }
    },
    app.config.leaseSweepIntervalMs,
    app.log,
  );
  const expirySweeper = new Sweeper(
    'checkpoint expiry sweep',
    async () => {
      const count = await lifecycle.expireCheckpoints();
      if (count > 0) app.log.info({ checkpoints: count }, 'checkpoints deleted by retention or TTL');
    },
    app.config.checkpointExpiryIntervalMs,
    app.log,
  );

  app.systemChecks.register('cpu_queue', () => workers.queueCheck(), { usesDatabase: true });
  app.systemChecks.register('gpu_queue', () => workers.workersCheck(), { usesDatabase: true });

  const streams = new JobEventStreams({ service, changes: jobChanges, currentPrincipal: (keyId) => app.auth.currentPrincipal(keyId), keepAliveMs: app.config.sseKeepAliveMs });
  await app.register(previewRoutes, { service, streams });
  const adapters = new AdapterService({ db, training: service, adaptersDir: releaser.adaptersDir, archiveLimitBytes: app.config.adapterArchiveLimitBytes });
  await app.register(lifecycleRoutes, { lifecycle, adapters, archiveLimitBytes: app.config.adapterArchiveLimitBytes });
  await app.register(workerRoutes, { workers });
  await app.register(releaseRoutes, { lifecycle });

  app.addHook('onReady', async () => {
    leaseSweeper.start();
    expirySweeper.start();
  });
  // preClose runs before the server stops waiting for in-flight requests: waiting claims answer 204 now
  // instead of holding the shutdown for up to 30 s, and no sweep runs on a closing database.
  app.addHook('preClose', async () => {
    signal.close();
    streams.close();
    await Promise.all([leaseSweeper.stop(), expirySweeper.stop()]);
  });
};
