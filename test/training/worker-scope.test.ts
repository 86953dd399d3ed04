import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { fileUriPath } from '../../src/training/protocol.js';
import { createTestApp, createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused, jsonRequest as json } from '../helpers/tenants.js';
import { call, groupGenerationA, ScriptedWorker, staleBody, userWithModel, type Reply } from './fixtures.js';

/** Worker keys reach only the jobs of their user's entities; an admin's worker key is the operator pool. */

let app: App;
let owner: TestUser;
let other: TestUser;

beforeAll(async () => {
  // Long leases: no test's lease lapses on its own while another compares database fingerprints.
  app = await createTestApp({ WORKER_LEASE_SECONDS: '600' });
  ({ owner, other } = await createTenants(app));
});
afterAll(async () => {
  await app.close();
});

async function queuedJob(user: TestUser, entity: string | null = null): Promise<{ model: any; jobId: string }> {
  const { model } = entity === null ? await userWithModel(app, user) : { model: await teamModel(user, entity) };
  const reply = await call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
  expect(reply.status, reply.text).toBe(200);
  return { model, jobId: reply.body.id };
}

async function teamModel(user: TestUser, team: string): Promise<any> {
  const body = { entity: team, project: 'proj', name: uniqueName('agent'), base_model: uniqueName('Qwen/Qwen3-14B') };
  const reply = await call(app, user.headers, 'POST', '/v1/preview/models', body);
  expect(reply.status, reply.text).toBe(200);
  return reply.body;
}

const jobStatus = async (jobId: string) => (await call(app, owner.headers, 'GET', `/v1/preview/training-jobs/${jobId}`)).body.status;

/** A worker key of `user`, used once so that the fingerprints below compare refusals only (first use writes last_used_at). */
async function warmWorkerKey(user: TestUser): Promise<TestUser> {
  const { key, headers } = await createWorkerKey(app, user.username);
  await call(app, headers, 'POST', '/v1/workers/claim', { worker_id: 'warm-up', base_models: ['none'] });
  return { ...user, key, headers };
}


describe('a worker key of an ordinary user', () => {
  it('claims none of another tenant\'s jobs, while the owner\'s worker key claims them', async () => {
    const { model, jobId } = await queuedJob(owner);
    const intruder = await ScriptedWorker.create(app, other, [model.base_model]);
    expect(await intruder.claim()).toBeUndefined();
    expect(await jobStatus(jobId)).toBe('QUEUED');
    const own = await ScriptedWorker.create(app, owner, [model.base_model]);
    expect((await own.claim())!.job).toMatchObject({ id: jobId, model: { entity: owner.entity } });
  });

  it('cannot read, renew, post to, complete or fail another tenant\'s running job, even holding its lease token', async () => {
    const { model, jobId } = await queuedJob(owner);
    const ownWorker = await ScriptedWorker.create(app, owner, [model.base_model]);
    const claimed = (await ownWorker.claim())!;
    const intruder = await warmWorkerKey(other);
    const lease = { lease_token: claimed.lease.token };
    const base = `/v1/workers/jobs/${jobId}`;
    const stale = { status: 409 as const, body: staleBody(jobId), secrets: [model.name] };

    await expectOtherTenantRefused(app, json('GET', `${base}/inputs`, intruder), {
      status: 404,
      body: { detail: `training job ${jobId} not found` },
      secrets: [model.name, 'content'],
    });
    await expectOtherTenantRefused(app, json('POST', `${base}/heartbeat`, intruder, lease), stale);
    await expectOtherTenantRefused(
      app,
      json('POST', `${base}/events`, intruder, { ...lease, events: [{ type: 'training_started', data: { num_sequences: 1 } }] }),
      stale,
    );
    await expectOtherTenantRefused(app, json('POST', `${base}/complete`, intruder, { ...lease, checkpoint: { uri: '/adapters/evil/1', metrics: {} } }), stale);
    await expectOtherTenantRefused(app, json('POST', `${base}/fail`, intruder, { ...lease, error_message: 'x', retryable: false }), stale);

    // The owner's worker still holds the job and finishes it.
    expect((await ownWorker.heartbeat(claimed)).status).toBe(200);
    expect((await ownWorker.events(claimed, [{ type: 'training_started', data: { num_sequences: 0 } }])).status).toBe(200);
    expect((await ownWorker.complete(claimed)).body.job).toMatchObject({ id: jobId, status: 'COMPLETED' });
  });

  it('reaches the jobs of the teams its user belongs to, and of no other team', async () => {
    const team = uniqueName('team');
    await app.auth.createTeam({ name: team });
    await app.auth.addMember({ team, username: owner.username });
    const member = await createUserWithKey(app, { prefix: 'member' });
    await app.auth.addMember({ team, username: member.username });
    const { model, jobId } = await queuedJob(owner, team);

    expect(await (await ScriptedWorker.create(app, other, [model.base_model])).claim()).toBeUndefined();
    const claimed = (await (await ScriptedWorker.create(app, member, [model.base_model])).claim())!;
    expect(claimed.job).toMatchObject({ id: jobId, model: { entity: team } });
  });

  it('stops reaching a team\'s jobs, and the lease it holds on one, once its user is removed from the team', async () => {
    const team = uniqueName('team');
    await app.auth.createTeam({ name: team });
    await app.auth.addMember({ team, username: owner.username });
    const member = await createUserWithKey(app, { prefix: 'member' });
    await app.auth.addMember({ team, username: member.username });
    const { model } = await queuedJob(owner, team);
    const worker = await ScriptedWorker.create(app, member, [model.base_model]);
    const claimed = (await worker.claim())!;
    expect((await worker.heartbeat(claimed)).status).toBe(200);

    // A second job of the team on the same base model, which the worker could run.
    const body = { entity: team, project: 'proj', name: uniqueName('agent'), base_model: model.base_model };
    const second = await call(app, owner.headers, 'POST', '/v1/preview/models', body);
    expect(second.status, second.text).toBe(200);
    const job = await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: second.body.id, trajectory_groups: [groupGenerationA()] });
    expect(job.status, job.text).toBe(200);

    await app.auth.removeMember({ team, username: member.username });
    expect((await worker.heartbeat(claimed)).status).toBe(409);
    expect(await worker.claim()).toBeUndefined();
    // Its user's keys reach the team again once added back.
    await app.auth.addMember({ team, username: member.username });
    expect((await worker.claim())!.job).toMatchObject({ id: job.body.id });
  });
});

describe('a worker key of an admin (the operator\'s shared pool)', () => {
  it('claims, reads and completes any tenant\'s job', async () => {
    const { model, jobId } = await queuedJob(owner);
    const admin = await createUserWithKey(app, { prefix: 'operator', isAdmin: true });
    const pool = await ScriptedWorker.create(app, admin, [model.base_model]);
    const claimed = (await pool.claim())!;
    expect(claimed.job).toMatchObject({ id: jobId, model: { entity: owner.entity } });
    expect(await pool.inputs(claimed)).toHaveLength(1);
    expect((await pool.events(claimed, [{ type: 'training_started', data: { num_sequences: 0 } }])).status).toBe(200);
    expect((await pool.complete(claimed)).body.job).toMatchObject({ id: jobId, status: 'COMPLETED' });
  });
});

describe('checkpoint URIs', () => {
  async function runningJob(): Promise<{ worker: ScriptedWorker; jobId: string; lease_token: string }> {
    const { model, jobId } = await queuedJob(owner);
    const worker = await ScriptedWorker.create(app, owner, [model.base_model]);
    const claimed = (await worker.claim())!;
    expect((await worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 0 } }])).status).toBe(200);
    return { worker, jobId, lease_token: claimed.lease.token };
  }

  const refusal = (uri: string, why: string) => ({
    detail: [
      {
        type: 'value_error',
        loc: ['body', 'checkpoint', 'uri'],
        msg: `Value error, checkpoint URI ${JSON.stringify(uri)} is not allowed: ${why}`,
        input: uri,
      },
    ],
  });
  const PREFIXES = 'it must start with one of /adapters/, s3:// (CHECKPOINT_URI_PREFIXES)';

  it('refuses a URI outside CHECKPOINT_URI_PREFIXES (default /adapters/ and s3://) with a 422 that changes nothing', async () => {
    const { worker, jobId, lease_token } = await runningJob();
    for (const uri of ['/etc/passwd', 'OpenPipe/some-lora', 'file:///adapters/x', '/adapters', 'http://10.0.0.1/lora', '/data/adapters/x']) {
      const before = await databaseFingerprint(app);
      const reply = await worker.call('POST', `/v1/workers/jobs/${jobId}/complete`, { lease_token, checkpoint: { uri, metrics: {} } });
      expect(reply.status, uri).toBe(422);
      expect(reply.body).toEqual(refusal(uri, PREFIXES));
      expect(await databaseFingerprint(app)).toEqual(before);
    }
    const done = await worker.call('POST', `/v1/workers/jobs/${jobId}/complete`, { lease_token, checkpoint: { uri: '/adapters/m/1', metrics: {} } });
    expect(done.body).toMatchObject({ job: { status: 'COMPLETED' }, checkpoint: { step: 1, uri: '/adapters/m/1' } });
  });

  it('refuses "." and ".." segments that would climb out of an allowed prefix', async () => {
    const { worker, jobId, lease_token } = await runningJob();
    for (const uri of ['/adapters/../etc/passwd', '/adapters/m/./1', '/adapters/%2E%2E/etc', 's3://bucket/..', '/adapters/..%2fetc']) {
      const reply = await worker.call('POST', `/v1/workers/jobs/${jobId}/complete`, { lease_token, checkpoint: { uri, metrics: {} } });
      expect(reply.status, uri).toBe(422);
      expect(reply.body).toEqual(refusal(uri, 'it must not contain "." or ".." path segments'));
    }
    expect(await jobStatus(jobId)).toBe('RUNNING');
  });

  /** A job of a new user's model claimed on `configured`, and a function that completes it with a checkpoint URI. */
  async function completeOfClaimedJob(configured: App): Promise<(uri: string) => Promise<Reply>> {
    const user = await createUserWithKey(configured);
    const { model } = await userWithModel(configured, user);
    await call(configured, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const worker = await ScriptedWorker.create(configured, user, [model.base_model]);
    const claimed = (await worker.claim())!;
    return (uri) => worker.call('POST', `/v1/workers/jobs/${claimed.job.id}/complete`, { lease_token: claimed.lease.token, checkpoint: { uri, metrics: {} } });
  }

  it('refuses a file: URI that names no local path for sure (a broken escape, a query or fragment, another host)', async () => {
    const configured = await createTestApp({ CHECKPOINT_URI_PREFIXES: 'file:///adapters/' });
    try {
      const complete = await completeOfClaimedJob(configured);
      const why = 'a file: URI must name a local path, percent-encoded as pathToFileURL writes it (% as %25, # as %23), with no query or fragment';
      for (const uri of ['file:///adapters/run-100%/step-1', 'file:///adapters/run#2/step-1', 'file:///adapters/m?v=1', 'file:///adapters/a%2Fb']) {
        const reply = await complete(uri);
        expect([reply.status, reply.body], uri).toEqual([422, refusal(uri, why)]);
      }
      // As pathToFileURL writes /adapters/run-100%/step#2: registered, and exports read that path.
      const encoded = 'file:///adapters/run-100%25/step%232';
      expect(fileUriPath(encoded)).toBe('/adapters/run-100%/step#2');
      expect((await complete(encoded)).body).toMatchObject({ checkpoint: { uri: encoded } });
    } finally {
      await configured.close();
    }
  });

  it('allows the prefixes the operator configures, and only those', async () => {
    const configured = await createTestApp({ CHECKPOINT_URI_PREFIXES: '/mnt/adapters/, gs://team-ckpts/' });
    try {
      const complete = await completeOfClaimedJob(configured);
      expect((await complete('s3://checkpoints/x')).body).toEqual(
        refusal('s3://checkpoints/x', 'it must start with one of /mnt/adapters/, gs://team-ckpts/ (CHECKPOINT_URI_PREFIXES)'),
      );
      expect((await complete('gs://team-ckpts/m/1')).body).toMatchObject({ checkpoint: { uri: 'gs://team-ckpts/m/1' } });
    } finally {
      await configured.close();
    }
  });

  it('takes CHECKPOINT_URI_PREFIXES only as prefixes ending in "/"', () => {
    expect(loadConfig({}).checkpointUriPrefixes).toEqual(['/adapters/', 's3://']);
    expect(loadConfig({ CHECKPOINT_URI_PREFIXES: ' /mnt/a/ ,s3://b/' }).checkpointUriPrefixes).toEqual(['/mnt/a/', 's3://b/']);
    // "/adapters" would also admit "/adapters-of-someone-else/...".
    expect(() => loadConfig({ CHECKPOINT_URI_PREFIXES: '/adapters' })).toThrow('CHECKPOINT_URI_PREFIXES="/adapters": each prefix must end with "/"');
    expect(() => loadConfig({ CHECKPOINT_URI_PREFIXES: ' , ' })).toThrow('CHECKPOINT_URI_PREFIXES=" , ": must name at least one prefix');
  });
});
