#!/usr/bin/env node
import { pino } from 'pino';
import { findExecutable } from './command.js';
import { loadWorkerOptions, WORKER_USAGE, WorkerUsageError } from './options.js';
import { Worker } from './worker.js';

/**
 * `trainyard-worker`: claims training jobs from a trainyard server and runs them with a trainer command
 * (docs/worker-runtime.md). SIGTERM or SIGINT drains: no new claims, running jobs get --drain-seconds to
 * finish, then their trainers are stopped and the attempts handed back as retryable. A second signal
 * skips the wait.
 */
async function main(): Promise<number> {
  let loaded;
  try {
    loaded = loadWorkerOptions();
  } catch (error) {
    if (!(error instanceof WorkerUsageError)) throw error;
    process.stderr.write(`trainyard-worker: ${error.message}\n\n${WORKER_USAGE}\n`);
    return 2;
  }
  if (loaded.help) {
    process.stdout.write(`${WORKER_USAGE}\n`);
    return 0;
  }
  const { options } = loaded;
  if (!findExecutable(options.command[0], options.trainerEnv)) {
    process.stderr.write(`trainyard-worker: the trainer command ${JSON.stringify(options.command[0])} was not found or is not executable\n`);
    return 2;
  }

  const logger = pino({ name: 'trainyard-worker', level: options.logLevel });
  const worker = new Worker(options, logger);
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    logger.info({ signal }, signals === 1 ? 'shutting down: draining' : 'shutting down now');
    if (signals === 1) worker.drain();
    else worker.stopNow();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  try {
    await worker.run();
    return 0;
  } catch (error) {
    logger.fatal({ err: (error as Error).message }, 'worker stopped on an error');
    return 1;
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`trainyard-worker: ${(error as Error).stack ?? String(error)}\n`);
    process.exitCode = 1;
  },
);
