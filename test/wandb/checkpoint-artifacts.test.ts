import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as legacyLoraArtifacts from '../../migrations/0019_legacy_lora_artifacts.js';
import type { App } from '../../src/app.js';
import { manifestDigest } from '../../src/wandb/service.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { uniqueName, type TestUser } from '../helpers/app.js';
import { createTenants, databaseFingerprint, jsonRequest } from '../helpers/tenants.js';
import { addCheckpoint, backendEntry, chat, createGatewayApp, createTrainedModel } from '../inference/gateway-helpers.js';
import { call, groupGenerationA, ScriptedWorker } from '../training/fixtures.js';
import { b64md5, commit, contentsOf, createArtifact, draft, gql, manifestOf, pathOf, put, uploadAndCommit } from './helpers.js';

/**
 * A trainable model's checkpoints as the W&B `lora` artifact named after the model: pulled by step,
 * version or `latest`, listed, annotated (record_provenance), and pushed (an uploaded `lora` artifact
 * becomes the checkpoint its step alias names, served by the gateway).
 */

const BASE = 'fake/base-model';
let engine: FakeEngine;
let app: App;
let owner: TestUser;
let other: TestUser;

beforeAll(async () => {
  engine = await startFakeEngine({ models: [BASE] });
  app = await createGatewayApp([backendEntry('main', [engine.url], { models: [BASE] })], { ADAPTERS_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-adapters-')), ADAPTER_ARCHIVE_LIMIT_MB: '1' });
  ({ owner, other } = await createTenants(app));
});
afterAll(async () => {
  await app.close();
  await engine.close();
});

/** A minimal valid safetensors file (header length, JSON header) with some payload bytes after it. */
function safetensors(payload = 'weights'): Buffer {
  const header = Buffer.from(JSON.stringify({ __metadata__: { format: 'pt' } }));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  return Buffer.concat([length, header, Buffer.from(payload)]);
}

function adapterFiles(options: { base?: string; payload?: string } = {}): Record<string, Buffer> {
  return {
    'adapter_config.json': Buffer.from(JSON.stringify({ base_model_name_or_path: options.base ?? BASE, peft_type: 'LORA', r: 8 })),
    'adapter_model.safetensors': safetensors(options.payload),
  };
}

/** A trainer's output directory: the adapter plus files that are not part of it (never served). */
function outputDir(files: Record<string, Buffer>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainer-out-'));
  for (const [name, data] of Object.entries({ ...files, 'optimizer.pt': Buffer.from('pickle') })) fs.writeFileSync(path.join(dir, name), data);
  return dir;
}

async function trainedModel(steps: Record<number, Record<string, Buffer> | string>, name = uniqueName('agent')) {
  const project = uniqueName('p');
  const model = await createTrainedModel(app, { entity: owner.entity, project, name });
  for (const [step, files] of Object.entries(steps)) await addCheckpoint(app, model.id, Number(step), typeof files === 'string' ? files : outputDir(files));
  return { ...model, project, name };
}

const MEMBERSHIP = `query($entity: String!, $project: String!, $name: String!) { project(name: $project, entityName: $entity) { artifactCollectionMembership(name: $name) {
  versionIndex aliases { alias } artifact { id state digest size fileCount metadata artifactType { name } currentManifest { file { directUrl } } }
  files { edges { node { name md5 sizeBytes directUrl } } } } } }`;

const LIST = `query($entity: String!, $project: String!, $name: String!) { project(name: $project, entityName: $entity) { artifactType(name: "lora") { artifactCollection(name: $name) {
  artifacts(filters: "{\\"state\\": \\"COMMITTED\\"}") { totalCount edges { version node { versionIndex aliases { alias } } } } } } } }`;

async function membership(as: TestUser, project: string, name: string) {
  return gql(app, as, MEMBERSHIP, { entity: owner.entity, project, name });
}

const checkpointSteps = async (modelId: string) =>
  (await app.inject(jsonRequest('GET', `/v1/preview/models/${modelId}/checkpoints`, owner))).json().data.map((c: { step: number }) => c.step);

describe('pulling checkpoints', () => {
  it('serves each checkpoint as version v<step> with aliases step<N> and latest, its adapter files with their MD5s, byte for byte', async () => {
    const step1 = adapterFiles({ payload: 'one' });
    const step3 = adapterFiles({ payload: 'three' });
    const model = await trainedModel({ 1: step1, 3: step3 });
    for (const [alias, files, step, aliases] of [
      ['step3', step3, 3, ['v3', 'latest', 'step3']],
      ['latest', step3, 3, ['v3', 'latest', 'step3']],
      ['v1', step1, 1, ['v1', 'step1']],
    ] as const) {
      const answer = await membership(owner, model.project, `${model.name}:${alias}`);
      expect(answer.errors, alias).toBeUndefined();
      const m = answer.data!.project.artifactCollectionMembership;
      expect(m.versionIndex).toBe(step);
      expect(m.aliases.map((a: { alias: string }) => a.alias)).toEqual(aliases);
      const contents = contentsOf(files);
      const size = Object.values(files).reduce((sum, data) => sum + data.length, 0);
      expect(m.artifact).toMatchObject({ state: 'COMMITTED', artifactType: { name: 'lora' }, digest: manifestDigest(contents), fileCount: 2, size });
      const served = m.files.edges.map((e: any) => e.node);
      expect(served.map((f: any) => [f.name, f.md5, f.sizeBytes])).toEqual(Object.entries(contents).map(([name, c]) => [name, c.digest, c.size]));
      for (const file of served) {
        const download = await app.inject({ method: 'GET', url: pathOf(file.directUrl) });
        expect(download.statusCode).toBe(200);
        expect(download.rawPayload.equals(files[file.name as keyof typeof files])).toBe(true);
      }
      const manifest = await app.inject({ method: 'GET', url: pathOf(m.artifact.currentManifest.file.directUrl) });
      expect(Object.fromEntries(Object.entries(manifest.json().contents).map(([name, c]: [string, any]) => [name, { digest: c.digest, size: c.size }]))).toEqual(contents);
    }
  });

  it('lists the versions newest first, as ProjectArtifacts asks for them', async () => {
    const model = await trainedModel({ 1: adapterFiles({ payload: 'a' }), 2: adapterFiles({ payload: 'b' }) });
    const answer = await gql(app, owner, LIST, { entity: owner.entity, project: model.project, name: model.name });
    expect(answer.data!.project.artifactType.artifactCollection.artifacts).toEqual({
      totalCount: 2,
      edges: [
        { version: 'v2', node: { versionIndex: 2, aliases: [{ alias: 'v2' }, { alias: 'latest' }, { alias: 'step2' }] } },
        { version: 'v1', node: { versionIndex: 1, aliases: [{ alias: 'v1' }, { alias: 'step1' }] } },
      ],
    });
  });

  it('treats a checkpoint stored elsewhere as no artifact: latest is none, its step is an error saying where it is, listings leave it out', async () => {
    const model = await trainedModel({ 1: adapterFiles(), 2: 's3://bucket/agent/2' });
    expect(await membership(owner, model.project, `${model.name}:latest`)).toEqual({ data: { project: { artifactCollectionMembership: null } } });
    const named = await membership(owner, model.project, `${model.name}:step2`);
    expect(named.errors).toEqual([
      { message: `The adapter of ${owner.entity}/${model.project}/${model.name}:step2 is stored at s3://bucket/agent/2, which is not a path on this server: download it from that storage directly.`, path: ['project', 'artifactCollectionMembership'] },
    ]);
    const listed = await gql(app, owner, LIST, { entity: owner.entity, project: model.project, name: model.name });
    expect(listed.data!.project.artifactType.artifactCollection.artifacts.edges.map((e: any) => e.version)).toEqual(['v1']);
  });

  it('never serves a file changed since its MD5 was taken, and hashes it again at the next lookup', async () => {
    const model = await trainedModel({ 1: adapterFiles({ payload: 'before' }) });
    const first = (await membership(owner, model.project, `${model.name}:step1`)).data!.project.artifactCollectionMembership;
    const weights = first.files.edges.find((e: any) => e.node.name === 'adapter_model.safetensors').node;
    const dir = (await app.db.selectFrom('checkpoints').select('uri').where('model_id', '=', model.id).executeTakeFirstOrThrow()).uri;
    const changed = safetensors('after, and longer');
    fs.writeFileSync(path.join(dir, 'adapter_model.safetensors'), changed);
    const stale = await app.inject({ method: 'GET', url: pathOf(weights.directUrl) });
    expect(stale.statusCode).toBe(404);
    expect(stale.json()).toEqual({ detail: 'file not found' });
    const again = (await membership(owner, model.project, `${model.name}:step1`)).data!.project.artifactCollectionMembership;
    const node = again.files.edges.find((e: any) => e.node.name === 'adapter_model.safetensors').node;
    expect([node.md5, node.sizeBytes]).toEqual([b64md5(changed), changed.length]);
    expect((await app.inject({ method: 'GET', url: pathOf(node.directUrl) })).rawPayload.equals(changed)).toBe(true);
  });
  it('serves a model registered again under a deleted one\'s name with its own checkpoints only', async () => {
    const first = await trainedModel({ 1: adapterFiles({ payload: 'old' }) });
    const old = (await membership(owner, first.project, `${first.name}:step1`)).data!.project.artifactCollectionMembership.artifact.id;
    expect((await app.inject(jsonRequest('DELETE', `/v1/preview/models/${first.id}`, owner))).statusCode).toBeLessThan(300);
    expect(await membership(owner, first.project, `${first.name}:step1`)).toEqual({ data: { project: { artifactCollectionMembership: null } } });
    const again = await createTrainedModel(app, { entity: owner.entity, project: first.project, name: first.name });
    const files = adapterFiles({ payload: 'new' });
    await addCheckpoint(app, again.id, 1, outputDir(files));
    const m = (await membership(owner, first.project, `${first.name}:step1`)).data!.project.artifactCollectionMembership;
    expect(m.artifact.id).not.toBe(old);
    expect(m.artifact.digest).toBe(manifestDigest(contentsOf(files)));
    expect(await gql(app, owner, 'query($id: ID!) { artifact(id: $id) { id } }', { id: old })).toEqual({ data: { artifact: null } });
  });
});

describe('record_provenance', () => {
  it('stores the metadata UpdateArtifact sends on the latest checkpoint, and drops it with the checkpoint', async () => {
    const model = await trainedModel({ 1: adapterFiles() });
    const { id } = (await membership(owner, model.project, `${model.name}:latest`)).data!.project.artifactCollectionMembership.artifact;
    const metadata = JSON.stringify({ 'wandb.provenance': ['serverless-rl'] });
    const saved = await gql(app, owner, 'mutation($input: UpdateArtifactInput!) { result: updateArtifact(input: $input) { artifact { id metadata aliases { alias } } } }', {
      input: { artifactID: id, metadata, tagsToAdd: [], tagsToDelete: [] },
    });
    expect(saved).toEqual({ data: { result: { artifact: { id, metadata, aliases: [{ alias: 'v1' }, { alias: 'latest' }, { alias: 'step1' }] } } } });
    expect((await membership(owner, model.project, `${model.name}:step1`)).data!.project.artifactCollectionMembership.artifact.metadata).toBe(metadata);

    const aliases = await gql(app, owner, 'mutation($input: UpdateArtifactInput!) { updateArtifact(input: $input) { artifact { id } } }', {
      input: { artifactID: id, aliases: [{ alias: 'best', artifactCollectionName: model.name }] },
    });
    expect(aliases.errors![0].message).toBe("The aliases of a checkpoint's artifact are its step<N> and latest: they cannot be set.");

    await app.inject(jsonRequest('DELETE', `/v1/preview/models/${model.id}/checkpoints`, owner, { steps: [1] }));
    expect(await gql(app, owner, 'query($id: ID!) { artifact(id: $id) { id } }', { id })).toEqual({ data: { artifact: null } });
  });
});

describe('pushing a lora artifact', () => {
  const pushAliases = (step: number) => [`step${step}`, 'latest'];

  it('becomes the checkpoint its step alias names, served by the gateway, pulled back byte for byte, with its bytes kept only in its directory', async () => {
    const model = await trainedModel({ 1: adapterFiles({ payload: 'trained' }) });
    const files = adapterFiles({ payload: 'pushed' });
    const pushed = await uploadAndCommit(app, owner, files, { project: model.project, name: model.name, type: 'lora', aliases: pushAliases(4), metadata: { 'wandb.base_model': BASE } });
    expect(pushed.committed).toEqual({ data: { commitArtifact: { artifact: { id: pushed.id, state: 'COMMITTED', versionIndex: 4 } } } });
    expect(await checkpointSteps(model.id)).toEqual([1, 4]);

    // The SDK's wait() reads the artifact by the id it created.
    const byId = await gql(app, owner, 'query($id: ID!) { artifact(id: $id) { versionIndex aliases { alias } metadata } }', { id: pushed.id });
    expect(byId.data!.artifact).toEqual({ versionIndex: 4, aliases: [{ alias: 'v4' }, { alias: 'latest' }, { alias: 'step4' }], metadata: JSON.stringify({ 'wandb.base_model': BASE }) });
    const pulled = (await membership(owner, model.project, `${model.name}:step4`)).data!.project.artifactCollectionMembership;
    expect(pulled.artifact.id).toBe(pushed.id);
    for (const { node } of pulled.files.edges) {
      expect((await app.inject({ method: 'GET', url: pathOf(node.directUrl) })).rawPayload.equals(files[node.name as keyof typeof files])).toBe(true);
    }
    const blobs = await app.db.selectFrom('wandb_blobs').select('md5').where('entity', '=', owner.entity).execute();
    expect(blobs.map((b) => b.md5)).not.toContain(Buffer.from(b64md5(files['adapter_model.safetensors']), 'base64').toString('hex'));

    const completion = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: owner.headers, payload: chat(`${owner.entity}/${model.project}/${model.name}:step4`) });
    expect(completion.statusCode, completion.body).toBe(200);
    const uri = (await app.db.selectFrom('checkpoints').select('uri').where('model_id', '=', model.id).where('step', '=', 4).executeTakeFirstOrThrow()).uri;
    expect([...engine.adapters.values()]).toContain(uri);
    expect(fs.readdirSync(uri).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
  });

  it('answers the existing version when the step already holds the same files, so the SDK uploads nothing', async () => {
    const files = adapterFiles({ payload: 'same' });
    const model = await trainedModel({ 2: files });
    const existing = (await membership(owner, model.project, `${model.name}:step2`)).data!.project.artifactCollectionMembership.artifact.id;
    const again = await createArtifact(app, owner, files, { project: model.project, name: model.name, type: 'lora', aliases: pushAliases(2) });
    expect(again).toEqual({ data: { createArtifact: { artifact: { id: existing, state: 'COMMITTED', versionIndex: 2, aliases: [{ alias: 'v2' }, { alias: 'latest' }, { alias: 'step2' }] } } } });
  });

  it('without a step alias becomes the next step', async () => {
    const model = await trainedModel({ 5: adapterFiles() });
    const pushed = await uploadAndCommit(app, owner, adapterFiles({ payload: 'next' }), { project: model.project, name: model.name, type: 'lora', aliases: ['latest'] });
    expect(pushed.committed.data!.commitArtifact.artifact.versionIndex).toBe(6);
  });

  describe('refusals, which store nothing', () => {
    async function refusedAtCreate(files: Record<string, Buffer>, options: Parameters<typeof createArtifact>[3], message: string) {
      const before = await databaseFingerprint(app);
      const answer = await createArtifact(app, owner, files, options);
      expect(answer.errors![0].message).toBe(message);
      expect(await databaseFingerprint(app)).toEqual(before);
    }

    it('refuses at creation: no model of that name, another base model in the metadata, a step that holds other files, two step aliases, another type under a model\'s name', async () => {
      const model = await trainedModel({ 1: adapterFiles({ payload: 'one' }) });
      await membership(owner, model.project, `${model.name}:latest`);
      const where = `${owner.entity}/${model.project}`;
      await refusedAtCreate(adapterFiles(), { project: model.project, name: 'nobody', type: 'lora', aliases: pushAliases(1) },
        `No trainyard model ${where}/nobody: a "lora" artifact becomes a checkpoint of the model it is named after; register the model first (POST /v1/preview/models).`);
      await refusedAtCreate(adapterFiles(), { project: model.project, name: model.name, type: 'lora', aliases: pushAliases(2), metadata: { 'wandb.base_model': 'Qwen/Qwen3-14B' } },
        `The artifact's metadata names base model Qwen/Qwen3-14B, but model ${where}/${model.name} is based on ${BASE}.`);
      await refusedAtCreate(adapterFiles({ payload: 'other' }), { project: model.project, name: model.name, type: 'lora', aliases: pushAliases(1) },
        `Model ${where}/${model.name} already has a checkpoint at step 1: push under another step<N> alias, or delete that checkpoint first.`);
      await refusedAtCreate(adapterFiles(), { project: model.project, name: model.name, type: 'lora', aliases: ['step2', 'step3'] },
        'Give at most one step<N> alias: it names the step of the checkpoint the artifact becomes.');
      await refusedAtCreate(adapterFiles(), { project: model.project, name: model.name, type: 'dataset' },
        `${where}/${model.name} names a trainyard model, whose checkpoints are the "lora" artifact of that name: give a "dataset" artifact another name.`);
    });

    async function refusedAtCommit(files: Record<string, Buffer>, model: { project: string; name: string }, step: number, message: string) {
      // The model's collection row, which any lookup makes, is there before: the push leaves nothing besides.
      await membership(owner, model.project, `${model.name}:latest`);
      const before = await databaseFingerprint(app);
      const pushed = await uploadAndCommit(app, owner, files, { project: model.project, name: model.name, type: 'lora', aliases: pushAliases(step) });
      expect(pushed.committed.errors![0].message).toBe(message);
      expect(await databaseFingerprint(app)).toEqual(before);
    }

    it('refuses at commit, dropping what was uploaded: another base model, pickle weights, files that are not an adapter\'s, a LoRA that changes its base, more than ADAPTER_ARCHIVE_LIMIT_MB', async () => {
      const model = await trainedModel({});
      const dirs = fs.readdirSync(app.config.adaptersDir);
      const cannot = `The artifact cannot become a checkpoint of ${owner.entity}/${model.project}/${model.name}`;
      await refusedAtCommit(adapterFiles({ base: 'Qwen/Qwen3-14B' }), model, 1, `${cannot}: the adapter was trained on Qwen/Qwen3-14B, but model ${owner.entity}/${model.project}/${model.name} is based on ${BASE}.`);
      const pickle = { 'adapter_config.json': adapterFiles()['adapter_config.json'], 'adapter_model.bin': Buffer.from('pickle') };
      await refusedAtCommit(pickle, model, 1, `${cannot}: adapter_model.bin: pickle files are refused (loading one can run code); save the adapter with safetensors (save_pretrained(..., safe_serialization=True)).`);
      await refusedAtCommit({ ...adapterFiles(), 'run.sh': Buffer.from('echo hi') }, model, 1, `${cannot}: run.sh: not a file of a PEFT adapter; allowed: adapter_config.json, adapter_model.safetensors, README.md, tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.jinja, vocab.json, merges.txt.`);
      const saved = { ...adapterFiles(), 'adapter_config.json': Buffer.from(JSON.stringify({ base_model_name_or_path: BASE, peft_type: 'LORA', r: 8, modules_to_save: ['lm_head'] })) };
      await refusedAtCommit(saved, model, 1, `${cannot}: adapter_config.json has modules_to_save ["lm_head"]: only plain LoRA adapters are taken, which leave the base model unchanged and which vLLM serves.`);
      const big = { ...adapterFiles(), 'adapter_model.safetensors': safetensors('x'.repeat(1024 * 1024)) };
      await refusedAtCommit(big, model, 1, `${cannot}: its files hold more than ADAPTER_ARCHIVE_LIMIT_MB (1048576 bytes).`);
      expect(fs.readdirSync(app.config.adaptersDir)).toEqual(dirs);
    });

    it('refuses at commit while a training job of the model runs, since its worker will register the next step', async () => {
      const model = await trainedModel({ 1: adapterFiles() });
      const worker = await ScriptedWorker.create(app, owner, [BASE]);
      await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
      const running = await worker.claim(5);
      await refusedAtCommit(adapterFiles({ payload: 'during' }), model, 5, `Model ${owner.entity}/${model.project}/${model.name} has a training job running, which will register the next step: push when it has ended.`);
      expect((await worker.complete(running!)).status).toBe(200);
      expect(await checkpointSteps(model.id)).toEqual([1, 2]);
    });

    it('refuses at commit a step registered meanwhile', async () => {
      const model = await trainedModel({});
      const d = await draft(app, owner, adapterFiles(), { project: model.project, name: model.name, type: 'lora', aliases: pushAliases(1) });
      const files = adapterFiles();
      for (const [i, url] of d.uploadUrls.entries()) if (url) await put(app, url, Object.values(files)[i]);
      await put(app, d.manifestUrl, JSON.stringify(manifestOf(contentsOf(files))));
      await addCheckpoint(app, model.id, 1, 's3://elsewhere/1');
      const answer = await commit(app, owner, d.id);
      expect(answer.errors![0].message).toBe(`Model ${owner.entity}/${model.project}/${model.name} already has a checkpoint at step 1: push under another step<N> alias, or delete that checkpoint first.`);
      expect(await gql(app, owner, 'query($id: ID!) { artifact(id: $id) { id } }', { id: d.id })).toEqual({ data: { artifact: null } });
    });
  });
});

describe('lora artifacts stored before checkpoints were artifacts (before migration 0014)', () => {
  interface LegacyVersion {
    index: number;
    aliases: string[];
    files: Record<string, Buffer>;
  }

  /** Rows as a release before 0014 committed a pushed `lora` artifact: plain ones, bytes as blobs. */
  async function storeLegacy(project: string, name: string, versions: LegacyVersion[]): Promise<number[]> {
    const { id: collectionId } = await app.db
      .insertInto('wandb_collections')
      .values({ entity: owner.entity, project, name, type: 'lora' })
      .onConflict((c) => c.constraint('wandb_collections_name_uq').doUpdateSet({ type: 'lora' }))
      .returning('id')
      .executeTakeFirstOrThrow();
    const ids: number[] = [];
    for (const version of versions) {
      const contents = contentsOf(version.files);
      const manifest = Buffer.from(JSON.stringify(manifestOf(contents)));
      for (const data of [...Object.values(version.files), manifest]) {
        const md5 = Buffer.from(b64md5(data), 'base64').toString('hex');
        await app.db.insertInto('wandb_blobs').values({ entity: owner.entity, md5, size: data.length, data }).onConflict((c) => c.columns(['entity', 'md5']).doNothing()).execute();
      }
      const { id } = await app.db
        .insertInto('wandb_artifacts')
        .values({
          collection_id: collectionId,
          version_index: version.index,
          state: 'COMMITTED',
          digest: manifestDigest(contents),
          description: null,
          metadata: null,
          run_name: null,
          storage_region: null,
          manifest_token: uniqueName('manifest'),
          manifest_md5: Buffer.from(b64md5(manifest), 'base64').toString('hex'),
          manifest_expected_md5: b64md5(manifest),
          size: Object.values(version.files).reduce((sum, data) => sum + data.length, 0),
          file_count: Object.keys(version.files).length,
        })
        .returning('id')
        .executeTakeFirstOrThrow();
      await app.db
        .insertInto('wandb_artifact_files')
        .values(Object.entries(contents).map(([file, c]) => ({ artifact_id: id, name: file, md5: c.digest, size: c.size, birth_artifact_id: id, token: uniqueName('file') })))
        .execute();
      if (version.aliases.length) await app.db.insertInto('wandb_aliases').values(version.aliases.map((alias) => ({ collection_id: collectionId, alias, artifact_id: id }))).execute();
      ids.push(Number(id));
    }
    return ids;
  }

  const legacyFiles = (text: string) => ({ 'adapter_model.safetensors': safetensors(text), 'notes.txt': Buffer.from(`notes of ${text}`) });

  async function expectServed(project: string, name: string, files: Record<string, Buffer>, versionIndex: number) {
    const answer = await membership(owner, project, name);
    expect(answer.errors, name).toBeUndefined();
    const m = answer.data!.project.artifactCollectionMembership;
    expect(m, name).not.toBeNull();
    expect([m.versionIndex, m.artifact.digest, m.artifact.artifactType.name]).toEqual([versionIndex, manifestDigest(contentsOf(files)), 'lora']);
    expect(m.files.edges.map((e: any) => e.node.name)).toEqual(Object.keys(files).sort());
    for (const { node } of m.files.edges) {
      const download = await app.inject({ method: 'GET', url: pathOf(node.directUrl) });
      expect(download.statusCode).toBe(200);
      expect(download.rawPayload.equals(files[node.name])).toBe(true);
    }
    const manifest = await app.inject({ method: 'GET', url: pathOf(m.artifact.currentManifest.file.directUrl) });
    expect(Object.keys(manifest.json().contents).sort()).toEqual(Object.keys(files).sort());
    return m;
  }

  const runMigration = () => legacyLoraArtifacts.up(app.db as unknown as Kysely<unknown>);
  const artifactRows = async (ids: number[]) =>
    (await app.db.selectFrom('wandb_artifacts as a').innerJoin('wandb_collections as k', 'k.id', 'a.collection_id').select(['a.id', 'k.name', 'a.version_index']).where('a.id', 'in', ids).orderBy('a.id').execute())
      .map((r) => [Number(r.id), r.name, r.version_index]);

  it('serves one under a name no model has as stored, by alias and version, byte for byte, and appends pushed versions to it', async () => {
    const project = uniqueName('p');
    const name = uniqueName('my-adapter');
    const [v0, v1] = [legacyFiles('zero'), legacyFiles('one')];
    await storeLegacy(project, name, [{ index: 0, aliases: ['best'], files: v0 }, { index: 1, aliases: ['latest'], files: v1 }]);
    await runMigration();

    expect((await expectServed(project, `${name}:best`, v0, 0)).aliases).toEqual([{ alias: 'v0' }, { alias: 'best' }]);
    await expectServed(project, `${name}:v1`, v1, 1);
    await expectServed(project, name, v1, 1);

    const v2 = legacyFiles('two');
    const pushed = await uploadAndCommit(app, owner, v2, { project, name, type: 'lora', aliases: ['candidate'] });
    expect(pushed.committed).toEqual({ data: { commitArtifact: { artifact: { id: pushed.id, state: 'COMMITTED', versionIndex: 2 } } } });
    await expectServed(project, `${name}:latest`, v2, 2);
    await expectServed(project, `${name}:candidate`, v2, 2);
  });

  it('serves one under a deleted model\'s name as stored, the model\'s checkpoints gone with it', async () => {
    const model = await trainedModel({ 1: adapterFiles() });
    await membership(owner, model.project, `${model.name}:v1`);
    expect((await app.inject(jsonRequest('DELETE', `/v1/preview/models/${model.id}`, owner))).statusCode).toBeLessThan(300);
    const v0 = legacyFiles('zero');
    await storeLegacy(model.project, model.name, [{ index: 0, aliases: ['latest'], files: v0 }]);
    await runMigration();

    await expectServed(model.project, model.name, v0, 0);
    expect(await membership(owner, model.project, `${model.name}:v1`)).toEqual({ data: { project: { artifactCollectionMembership: null } } });
    const listed = await gql(app, owner, LIST, { entity: owner.entity, project: model.project, name: model.name });
    expect(listed.data!.project.artifactType.artifactCollection.artifacts).toEqual({ totalCount: 1, edges: [{ version: 'v0', node: { versionIndex: 0, aliases: [{ alias: 'v0' }, { alias: 'latest' }] } }] });
  });

  it('migration 0019 moves those under a live model\'s name to <name>-legacy with their versions, aliases, files and manifests; the checkpoints keep the name', async () => {
    const checkpoint1 = adapterFiles({ payload: 'checkpoint one' });
    const model = await trainedModel({ 1: checkpoint1, 2: adapterFiles({ payload: 'checkpoint two' }) });
    const [v0, v1] = [legacyFiles('best eval'), legacyFiles('candidate')];
    const ids = await storeLegacy(model.project, model.name, [{ index: 0, aliases: ['best-eval'], files: v0 }, { index: 1, aliases: ['candidate', 'latest'], files: v1 }]);
    await runMigration();
    const legacy = `${model.name}-legacy`;
    expect(await artifactRows(ids)).toEqual([[ids[0], legacy, 0], [ids[1], legacy, 1]]);

    const checkpoint = (await membership(owner, model.project, `${model.name}:v1`)).data!.project.artifactCollectionMembership;
    expect([checkpoint.versionIndex, checkpoint.artifact.digest, checkpoint.aliases]).toEqual([1, manifestDigest(contentsOf(checkpoint1)), [{ alias: 'v1' }, { alias: 'step1' }]]);
    expect((await expectServed(model.project, `${legacy}:candidate`, v1, 1)).aliases).toEqual([{ alias: 'v1' }, { alias: 'candidate' }, { alias: 'latest' }]);
    await expectServed(model.project, `${legacy}:v1`, v1, 1);
    await expectServed(model.project, `${legacy}:best-eval`, v0, 0);
    const listed = await gql(app, owner, LIST, { entity: owner.entity, project: model.project, name: legacy });
    expect(listed.data!.project.artifactType.artifactCollection.artifacts.edges.map((e: any) => e.version)).toEqual(['v1', 'v0']);
    expect(await artifactRows(ids)).toEqual([[ids[0], legacy, 0], [ids[1], legacy, 1]]);
  });

  it('migration 0019 takes <name>-legacy-2 when <name>-legacy is taken', async () => {
    const model = await trainedModel({ 1: adapterFiles() });
    await app.db.insertInto('wandb_collections').values({ entity: owner.entity, project: model.project, name: `${model.name}-legacy`, type: 'dataset' }).execute();
    const ids = await storeLegacy(model.project, model.name, [{ index: 1, aliases: ['latest'], files: legacyFiles('one') }]);
    await runMigration();
    expect(await artifactRows(ids)).toEqual([[ids[0], `${model.name}-legacy-2`, 1]]);
  });

  it('migration 0019 cuts a long model name so that <name>-legacy stays a W&B name of at most 128 characters, which takes pushes', async () => {
    const model = await trainedModel({ 1: adapterFiles() }, `${uniqueName('agent')}-`.padEnd(128, 'x'));
    const ids = await storeLegacy(model.project, model.name, [{ index: 1, aliases: ['latest'], files: legacyFiles('one') }]);
    await runMigration();
    const legacy = `${model.name.slice(0, 121)}-legacy`;
    expect(legacy).toHaveLength(128);
    expect(await artifactRows(ids)).toEqual([[ids[0], legacy, 1]]);
    const v2 = legacyFiles('two');
    const pushed = await uploadAndCommit(app, owner, v2, { project: model.project, name: legacy, type: 'lora', aliases: ['candidate'] });
    expect(pushed.committed).toEqual({ data: { commitArtifact: { artifact: { id: pushed.id, state: 'COMMITTED', versionIndex: 2 } } } });
  });

  it('a lookup of a model\'s version never deletes one stored under the model\'s name: it moves to <name>-legacy', async () => {
    const model = await trainedModel({ 1: adapterFiles({ payload: 'one' }), 2: adapterFiles({ payload: 'two' }) });
    const v1 = legacyFiles('user pushed');
    const ids = await storeLegacy(model.project, model.name, [{ index: 1, aliases: ['candidate', 'latest'], files: v1 }]);

    const checkpoint = (await membership(owner, model.project, `${model.name}:v1`)).data!.project.artifactCollectionMembership;
    expect(checkpoint.aliases).toEqual([{ alias: 'v1' }, { alias: 'step1' }]);
    expect(await artifactRows(ids)).toEqual([[ids[0], `${model.name}-legacy`, 1]]);
    await expectServed(model.project, `${model.name}-legacy:candidate`, v1, 1);
  });
});

describe('another tenant', () => {
  it('can neither pull, annotate nor push the owner\'s checkpoint artifacts', async () => {
    const model = await trainedModel({ 1: adapterFiles() });
    const { id } = (await membership(owner, model.project, `${model.name}:step1`)).data!.project.artifactCollectionMembership.artifact;
    // A key's first use records its last-use time: use it here, so the fingerprints compare refusals only.
    await gql(app, other, '{ viewer { id } }');
    const before = await databaseFingerprint(app);
    const cannot = `This API key cannot reach entity "${owner.entity}".`;
    expect(await membership(other, model.project, `${model.name}:step1`)).toEqual({ data: { project: null }, errors: [{ message: cannot, path: ['project'] }] });
    expect(await gql(app, other, 'query($id: ID!) { artifact(id: $id) { id } }', { id })).toEqual({ data: { artifact: null } });
    const annotate = await gql(app, other, 'mutation($input: UpdateArtifactInput!) { updateArtifact(input: $input) { artifact { id } } }', { input: { artifactID: id, metadata: '{}' } });
    expect(annotate.errors![0].message).toBe(`Artifact ${JSON.stringify(id)} not found.`);
    const push = await gql(app, other, 'mutation($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id } } }', {
      input: { entityName: owner.entity, projectName: model.project, artifactCollectionName: model.name, artifactTypeName: 'lora', digest: manifestDigest(contentsOf(adapterFiles())), aliases: [{ alias: 'step2', artifactCollectionName: model.name }] },
    });
    expect(push.errors![0].message).toBe(cannot);
    expect(await databaseFingerprint(app)).toEqual(before);
  });
});
