import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, SERVER_ENV, startWorker, waitFor, waitForStatus } from './harness.js';

/** The server registers checkpoints under these directories only: paths under the one, file:// URIs under the other. */
const allowed = fs.mkdtempSync(path.join(os.tmpdir(), 'allowed-adapters-'));
const allowedAsUri = fs.mkdtempSync(path.join(os.tmpdir(), 'allowed-uri-adapters-'));
let app: App;
let baseUrl: string;

beforeAll(async () => {
  app = await createTestApp({ ...SERVER_ENV, CHECKPOINT_URI_PREFIXES: `${allowed}/,s3://,${pathToFileURL(allowedAsUri).href}/` });
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
  fs.rmSync(allowed, { recursive: true, force: true });
  fs.rmSync(allowedAsUri, { recursive: true, force: true });
});

/** A debug logger whose lines (JSON) are kept. */
function keptLog() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      callback();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}

const WARN = 40;

describe('the worker checks its --output-dir against the server at start', () => {
  it('warns, naming both settings, when the server would refuse every checkpoint written there', async () => {
    const tenant = await createTenant(app);
    const { logger, lines } = keptLog();
    const { worker, done, settings } = startWorker(baseUrl, tenant, {}, logger);
    try {
      await waitFor(() => lines.some((line) => line.level === WARN && line.output_dir === settings.outputDir));
      const directory = `${settings.outputDir}/`;
      expect(lines.find((line) => line.output_dir === settings.outputDir)).toMatchObject({
        msg:
          `--output-dir ${directory} lies under none of the server's CHECKPOINT_URI_PREFIXES (${allowed}/, s3://, file://${allowedAsUri}/): ` +
          'a checkpoint written there is refused when its job ends, and the job fails. ' +
          `Add ${directory} to CHECKPOINT_URI_PREFIXES on the server, or choose an --output-dir under one of them.`,
        checkpoint_uri_prefixes: [`${allowed}/`, 's3://', `file://${allowedAsUri}/`],
      });
    } finally {
      worker.drain();
      await done;
    }
  });

  it('only notes it at debug level when the output directory lies under a prefix, and its job completes', async () => {
    const tenant = await createTenant(app);
    const { jobId } = await createJob(app, tenant);
    const { logger, lines } = keptLog();
    const outputDir = path.join(allowed, 'checkpoints');
    const { worker, done } = startWorker(baseUrl, tenant, { outputDir }, logger);
    try {
      expect(await waitForStatus(app, tenant, jobId, ['COMPLETED', 'FAILED'])).toMatchObject({ status: 'COMPLETED' });
      await waitFor(() => lines.some((line) => line.output_dir === outputDir));
    } finally {
      worker.drain();
      await done;
    }
    expect(lines.find((line) => line.output_dir === outputDir)).toMatchObject({ level: 20, msg: 'the server registers checkpoints under --output-dir' });
    expect(lines.filter((line) => (line.level as number) >= WARN)).toEqual([]);
  });

  it('takes a prefix of file:// URIs as covering the directory it names', async () => {
    const tenant = await createTenant(app);
    const { logger, lines } = keptLog();
    const outputDir = path.join(allowedAsUri, 'checkpoints');
    const { worker, done } = startWorker(baseUrl, tenant, { outputDir, baseModels: ['nothing-to-claim'] }, logger);
    try {
      await waitFor(() => lines.some((line) => line.output_dir === outputDir));
    } finally {
      worker.drain();
      await done;
    }
    expect(lines.find((line) => line.output_dir === outputDir)).toMatchObject({ level: 20, msg: 'the server registers checkpoints under --output-dir' });
  });
});
