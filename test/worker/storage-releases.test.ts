import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { WorkerClient } from '../../src/worker/client.js';
import { checkpointDirectory, RELEASE_SETTLE_MS, STORAGE_MARKER, StorageReleaser } from '../../src/worker/storage-releases.js';
import { createTestApp, uniqueName } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { call, createJob, createTenant, SERVER_ENV, startWorker, waitFor, waitForStatus, type Tenant } from './harness.js';

const MODEL = '0b8f7e3c-1d2a-4c5b-9e6f-7a8b9c0d1e2f';

describe('which release URIs name a checkpoint directory of the worker', () => {
  const out = '/mnt/adapters';
  it.each([
    [`/mnt/adapters/${MODEL}/step-3`, `/mnt/adapters/${MODEL}/step-3`],
    [`/mnt/adapters/${MODEL}/step-3/`, `/mnt/adapters/${MODEL}/step-3`],
    [`/mnt/adapters/./${MODEL}//step-0`, `/mnt/adapters/${MODEL}/step-0`],
    [`file:///mnt/adapters/${MODEL}/step-12`, `/mnt/adapters/${MODEL}/step-12`],
    [`file:///mnt/adapters/${MODEL}/step%2D4`, `/mnt/adapters/${MODEL}/step-4`],
  ])('%s is %s', (uri, directory) => {
    expect(checkpointDirectory(uri, out)).toBe(directory);
    expect(checkpointDirectory(uri, `${out}/`)).toBe(directory);
  });

  it.each([
    ['s3://adapters/x/step-3'],
    [`mnt/adapters/${MODEL}/step-3`],
    ['/mnt/adapters'],
    [`/mnt/adapters/${MODEL}`],
    [`/mnt/adapters/${MODEL}/step-3/adapter_model.safetensors`],
    [`/mnt/adapters/${MODEL}/step-03`],
    [`/mnt/adapters/${MODEL}/final`],
    ['/mnt/adapters/my-model/step-3'],
    [`/mnt/adapters/../etc/${MODEL}/step-3`],
    [`/mnt/other/${MODEL}/step-3`],
    [`/mnt/adapters/x/../../other/${MODEL}/step-3`],
    [`file://host/mnt/adapters/${MODEL}/step-3`],
    ['file:'],
  ])('%s is none', (uri) => {
    expect(checkpointDirectory(uri, out)).toBeUndefined();
  });
});

describe('releasing the storage of deleted checkpoints', () => {
  let app: App;
  let baseUrl: string;
  beforeAll(async () => {
    app = await createTestApp(SERVER_ENV);
    baseUrl = await listen(app);
  });
  afterAll(async () => {
    await app.close();
  });

  /** A model with checkpoints at these URIs (as a worker registered them), which the test then deletes. */
  async function modelWithCheckpoints(tenant: Tenant, uris: string[]): Promise<string> {
    const model = await call(app, tenant, 'POST', '/v1/preview/models', { project: 'releases', name: uniqueName('releases'), base_model: tenant.baseModel });
    for (const [i, uri] of uris.entries()) {
      await sql`insert into checkpoints (id, model_id, step, uri) values (${crypto.randomUUID()}, ${model.id}, ${i + 1}, ${uri})`.execute(app.db);
    }
    return model.id;
  }

  const deleteSteps = (tenant: Tenant, modelId: string, steps: number[]) => call(app, tenant, 'DELETE', `/v1/preview/models/${modelId}/checkpoints`, { steps });

  /** What the server still lists to the tenant's worker key. */
  async function listed(tenant: Tenant): Promise<string[]> {
    const response = await app.inject({ method: 'GET', url: '/v1/workers/checkpoint-releases?limit=1000', headers: { authorization: `Bearer ${tenant.workerKey}` } });
    return response.json().data.map((release: { uri: string }) => release.uri);
  }

  function adapterDir(outputDir: string, modelId: string, step: number): string {
    const dir = path.join(outputDir, modelId, `step-${step}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'adapter_config.json'), '{}');
    fs.writeFileSync(path.join(dir, 'adapter_model.safetensors'), 'weights');
    return dir;
  }

  function releaser(tenant: Tenant, outputDir: string, inUse: Set<string> = new Set(), now?: () => number) {
    const client = new WorkerClient({ serverUrl: baseUrl, key: tenant.workerKey, logger: pino({ level: 'silent' }) });
    return { releaser: new StorageReleaser(client, outputDir, pino({ level: 'silent' }), () => inUse, { now }), client };
  }

  it('deletes the output directories of deleted checkpoints and acknowledges them, leaving other storage and what is kept', async () => {
    const tenant = await createTenant(app);
    const outputDir = path.join(tenant.dir, 'adapters');
    const modelId = crypto.randomUUID();
    const [one, two, three] = [1, 2, 3].map((step) => adapterDir(outputDir, modelId, step));
    const elsewhere = fs.mkdtempSync(path.join(tenant.dir, 'elsewhere-'));
    fs.writeFileSync(path.join(elsewhere, 'adapter_model.safetensors'), 'weights');
    const model = await modelWithCheckpoints(tenant, [one, pathToFileURL(two).href, three, 's3://bucket/agent/4', elsewhere, path.join(outputDir, modelId, 'step-9')]);
    expect(await deleteSteps(tenant, model, [1, 2, 4, 5, 6])).toMatchObject({ deleted_count: 5 });

    let clock = Date.now();
    const { releaser: r, client } = releaser(tenant, outputDir, new Set(), () => clock);
    try {
      // Steps 1 and 2 are deleted; step 6's directory never existed (gone already): acknowledged too.
      expect(await r.sweep()).toEqual({ released: 3, others: 2, postponed: 0 });
      expect([fs.existsSync(one), fs.existsSync(two), fs.existsSync(three)]).toEqual([false, false, true]);
      expect(fs.readdirSync(elsewhere)).toEqual(['adapter_model.safetensors']);
      expect(await listed(tenant)).toEqual(['s3://bucket/agent/4', elsewhere]);

      // Deleting the last step removes the model's directory too. The releases left to others are looked at
      // again while they are recent (a lower id may still commit), then no more.
      await deleteSteps(tenant, model, [3]);
      clock += RELEASE_SETTLE_MS + 1000;
      expect(await r.sweep()).toEqual({ released: 1, others: 2, postponed: 0 });
      expect(fs.existsSync(path.join(outputDir, modelId))).toBe(false);
      expect(fs.readdirSync(outputDir)).toEqual([STORAGE_MARKER]);
      expect(await r.sweep()).toEqual({ released: 0, others: 0, postponed: 0 });
      expect(await listed(tenant)).toEqual(['s3://bucket/agent/4', elsewhere]);
    } finally {
      await client.close();
    }
  });

  it('finds a release committed after a higher one was listed (a long deleting transaction)', async () => {
    const tenant = await createTenant(app);
    const outputDir = path.join(tenant.dir, 'adapters');
    const modelId = crypto.randomUUID();
    const [early, late] = [1, 2].map((step) => adapterDir(outputDir, modelId, step));
    const model = await modelWithCheckpoints(tenant, [early, late]);
    // A long transaction (a model delete) takes its release id, then step 2's delete commits a higher one.
    const taken = await sql<{ id: string }>`select nextval(pg_get_serial_sequence('checkpoint_releases', 'id'))::text as id`.execute(app.db);
    await deleteSteps(tenant, model, [2]);
    let clock = Date.now();
    const { releaser: r, client } = releaser(tenant, outputDir, new Set(), () => clock);
    try {
      expect(await r.sweep()).toEqual({ released: 1, others: 0, postponed: 0 });
      // The long transaction commits its release (the lower id) only now.
      await sql`delete from checkpoints where model_id = ${model}`.execute(app.db);
      await sql`insert into checkpoint_releases (id, entity_id, uri, reason) overriding system value
        select ${taken.rows[0].id}::bigint, m.entity_id, ${early}, 'deleted' from models m where m.id = ${model}`.execute(app.db);
      clock += 60_000;
      expect(await r.sweep()).toEqual({ released: 1, others: 0, postponed: 0 });
      expect([fs.existsSync(early), fs.existsSync(late)]).toEqual([false, false]);
      expect(await listed(tenant)).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it('keeps a directory a running job uses, and a model directory that links out of the output directory, until a later sweep', async () => {
    const tenant = await createTenant(app);
    const outputDir = path.join(tenant.dir, 'adapters');
    const [used, other] = [crypto.randomUUID(), crypto.randomUUID()];
    const usedDir = adapterDir(outputDir, used, 1);
    const freeDir = adapterDir(outputDir, used, 2);
    // A model directory that is a link to somewhere outside: nothing is deleted through it.
    const outside = fs.mkdtempSync(path.join(tenant.dir, 'outside-'));
    adapterDir(outside, 'x', 1);
    fs.symlinkSync(path.join(outside, 'x'), path.join(outputDir, other));
    const linked = path.join(outputDir, other, 'step-1');
    const model = await modelWithCheckpoints(tenant, [usedDir, freeDir, linked]);
    await deleteSteps(tenant, model, [1, 2, 3]);

    const inUse = new Set([usedDir]);
    const { releaser: r, client } = releaser(tenant, outputDir, inUse);
    try {
      expect(await r.sweep()).toEqual({ released: 1, others: 0, postponed: 2 });
      expect([fs.existsSync(usedDir), fs.existsSync(freeDir)]).toEqual([true, false]);
      // The model's directory stays while a job uses one of its steps.
      expect(fs.existsSync(path.join(outputDir, used))).toBe(true);
      expect(fs.readdirSync(path.join(outside, 'x', 'step-1')).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
      expect(await listed(tenant)).toEqual([usedDir, linked]);

      inUse.clear();
      expect(await r.sweep()).toEqual({ released: 1, others: 0, postponed: 1 });
      expect(fs.existsSync(path.join(outputDir, used))).toBe(false);
      expect(await listed(tenant)).toEqual([linked]);
      expect(fs.existsSync(path.join(outside, 'x', 'step-1', 'adapter_model.safetensors'))).toBe(true);
    } finally {
      await client.close();
    }
  });

  it('acknowledges no missing directory while the output directory looks unmounted (empty, no marker), and does once it holds checkpoints', async () => {
    const tenant = await createTenant(app);
    // The mount point of a volume that is not mounted: empty.
    const outputDir = path.join(tenant.dir, 'mount');
    fs.mkdirSync(outputDir);
    const [gone, later] = [crypto.randomUUID(), crypto.randomUUID()];
    const model = await modelWithCheckpoints(tenant, [path.join(outputDir, gone, 'step-1'), path.join(outputDir, gone, 'step-2')]);
    await deleteSteps(tenant, model, [1, 2]);

    const { releaser: r, client } = releaser(tenant, outputDir);
    try {
      expect(await r.sweep()).toEqual({ released: 0, others: 0, postponed: 2 });
      expect(await r.sweep()).toEqual({ released: 0, others: 0, postponed: 2 });
      expect(await listed(tenant)).toHaveLength(2);
      expect(fs.readdirSync(outputDir)).toEqual([]);

      // The volume holds a model's checkpoints: the storage is there, the missing directories were deleted.
      adapterDir(outputDir, later, 1);
      expect(await r.sweep()).toEqual({ released: 2, others: 0, postponed: 0 });
      expect(await listed(tenant)).toEqual([]);
      expect(fs.readdirSync(outputDir).sort()).toEqual([STORAGE_MARKER, later].sort());

      // The marker stays when the model's directory goes, and vouches for the storage from then on.
      fs.rmSync(path.join(outputDir, later), { recursive: true });
      const other = await modelWithCheckpoints(tenant, [path.join(outputDir, later, 'step-7')]);
      await deleteSteps(tenant, other, [1]);
      expect(await r.sweep()).toEqual({ released: 1, others: 0, postponed: 0 });
    } finally {
      await client.close();
    }
  });

  it('pages past more releases of other storage than one list call returns', async () => {
    const tenant = await createTenant(app);
    const outputDir = path.join(tenant.dir, 'adapters');
    const modelId = crypto.randomUUID();
    const mine = adapterDir(outputDir, modelId, 1);
    const entity = await app.db.selectFrom('entities').select('id').where('name', '=', tenant.user.entity).executeTakeFirstOrThrow();
    await app.db
      .insertInto('checkpoint_releases')
      .values(Array.from({ length: 1001 }, (_, i) => ({ entity_id: entity.id, uri: `s3://bucket/other/${i}`, reason: 'deleted' as const })))
      .execute();
    const model = await modelWithCheckpoints(tenant, [mine]);
    await deleteSteps(tenant, model, [1]);

    const { releaser: r, client } = releaser(tenant, outputDir);
    try {
      expect(await r.sweep()).toEqual({ released: 1, others: 1001, postponed: 0 });
      expect(fs.existsSync(mine)).toBe(false);
    } finally {
      await client.close();
    }
  });

  it('keeps the directory of a deleted step that was trained again before the sweep', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant);
    const { worker, done, settings } = startWorker(baseUrl, tenant);
    const { releaser: r, client } = releaser(tenant, settings.outputDir);
    try {
      await waitForStatus(app, tenant, jobId, ['COMPLETED']);
      const dir = path.join(settings.outputDir, modelId, 'step-1');
      await deleteSteps(tenant, modelId, [1]);
      expect(await listed(tenant)).toEqual([dir]);
      // The next job trains step 1 again, into the same directory: the release no longer holds.
      const again = await call(app, tenant, 'POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [{ trajectories: [{ messages_and_choices: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }], reward: 1 }] }],
      });
      expect(await waitForStatus(app, tenant, again.id, ['COMPLETED'])).toMatchObject({ target_step: 1 });
      expect(await listed(tenant)).toEqual([]);
      expect(await r.sweep()).toEqual({ released: 0, others: 0, postponed: 0 });
      expect(fs.readdirSync(dir).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    } finally {
      worker.drain();
      await done;
      await client.close();
    }
  });

  it('is done by the worker runtime on its own: a trained checkpoint deleted through the API leaves no directory behind', async () => {
    const tenant = await createTenant(app);
    const { modelId, jobId } = await createJob(app, tenant);
    const { worker, done, settings } = startWorker(baseUrl, tenant, { releaseMs: 100 });
    try {
      await waitForStatus(app, tenant, jobId, ['COMPLETED']);
      const dir = path.join(settings.outputDir, modelId, 'step-1');
      expect(fs.existsSync(dir)).toBe(true);
      await deleteSteps(tenant, modelId, [1]);
      await waitFor(() => !fs.existsSync(dir), 20_000, () => `${dir} still exists`);
      await waitFor(async () => (await listed(tenant)).length === 0, 20_000, () => 'the release is still listed');
      expect(fs.readdirSync(settings.outputDir)).toEqual([STORAGE_MARKER]);
    } finally {
      worker.drain();
      await done;
    }
  });
});
