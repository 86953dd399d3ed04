import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { FailRequest } from '../../src/training/schemas.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createJob, createTenant, SERVER_ENV, startWorker, waitFor, waitForStatus } from './harness.js';

/**
 * The failure a worker reports must be one the server takes, whatever the trainer printed: otherwise the real
 * error is lost, and the job is retried after its lease lapses even when the trainer said retrying is useless.
 */

let app: App;
let baseUrl: string;
/** Jobs whose failure the server refuses (422) while it carries a stderr tail. */
const refuseTail = new Set<string>();

beforeAll(async () => {
  app = await createTestApp(SERVER_ENV, (app) => {
    app.addHook('preHandler', async (request, reply) => {
      const match = /^\/v1\/workers\/jobs\/([^/]+)\/fail$/.exec(request.url);
      const message = (request.body as { error_message?: string } | undefined)?.error_message ?? '';
      if (match && refuseTail.has(match[1]) && message.includes('stderr tail')) return reply.code(422).send({ detail: 'refused' });
    });
  });
  baseUrl = await listen(app);
});
afterAll(async () => {
  await app.close();
});

/** A trainer command: `script` run by node, with the job spec's path as process.argv[1]. */
const script = (source: string) => [process.execPath, '--input-type=module', '-e', source];

/** Runs one job with `command` and answers how it ended, from the worker's and the server's side. */
async function runJob(command: string[] | undefined, fixture: Record<string, unknown> = {}, refuse = false) {
  const tenant = await createTenant(app);
  const { jobId } = await createJob(app, tenant, fixture);
  if (refuse) refuseTail.add(jobId);
  const { worker, outcomes, done } = startWorker(baseUrl, tenant, command ? { command } : {});
  try {
    await waitFor(() => outcomes.has(jobId));
    const job = await waitForStatus(app, tenant, jobId, ['FAILED', 'COMPLETED']);
    return { outcome: outcomes.get(jobId), job };
  } finally {
    worker.drain();
    await done;
  }
}

describe('a failure message', () => {
  it('carries a stderr tail whose cut falls inside a surrogate pair without the half of it', async () => {
    const { outcome, job } = await runJob(script(`process.stderr.write('😀' + 'x'.repeat(3998) + '\\n'); process.exit(3);`));
    const message = `trainer command exited with code 3 (permanent failure); stderr tail:\n${'x'.repeat(3998)}`;
    expect(outcome).toEqual({ status: 'failed', retryable: false, message });
    expect(job).toMatchObject({ status: 'FAILED', attempt: 1, error_message: message });
  });

  it('carries a stderr tail holding a NUL byte with U+FFFD in its place', async () => {
    const { job } = await runJob(script(`process.stderr.write('loading tokenizer \\u0000\\u0001 garbage\\nValueError: bad config\\n'); process.exit(3);`));
    expect(job).toMatchObject({
      status: 'FAILED',
      attempt: 1,
      error_message: 'trainer command exited with code 3 (permanent failure); stderr tail:\nloading tokenizer \ufffd\u0001 garbage\nValueError: bad config',
    });
  });

  it('longer than the server takes loses its middle', async () => {
    // A checkpoint URI of 10,000 characters: refused, and named in the failure.
    const { job } = await runJob(
      script(`
        const spec = JSON.parse((await import('node:fs')).readFileSync(process.argv[1], 'utf8'));
        console.log(JSON.stringify({ type: 'checkpoint', uri: spec.output_dir + '/' + 'a'.repeat(10000) }));
      `),
    );
    expect(job).toMatchObject({ status: 'FAILED', attempt: 1 });
    expect(job.error_message.length).toBe(FailRequest.shape.error_message.maxLength);
    expect(job.error_message).toMatch(/^the server refused the checkpoint \/.*a…a+: HTTP 422: /s);
  });

  it('refused all the same is sent again without the stderr tail', async () => {
    const { outcome, job } = await runJob(undefined, { fixture_mode: 'permanent' }, true);
    const message = 'trainer command exited with code 3 (permanent failure)';
    expect(outcome).toEqual({ status: 'failed', retryable: false, message });
    expect(job).toMatchObject({ status: 'FAILED', attempt: 1, error_message: message });
  });
});
