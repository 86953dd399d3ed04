import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { manifestDigest } from '../../src/wandb/service.js';
import { createTestApp, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused, jsonRequest } from '../helpers/tenants.js';
import * as h from './helpers.js';
import { b64md5, manifestOf, pathOf } from './helpers.js';

let app: App;
let owner: TestUser;
let other: TestUser;

beforeAll(async () => {
  // A 1 MiB body limit: the largest file an upload URL takes.
  app = await createTestApp({ BODY_LIMIT_MB: '1' });
  ({ owner, other } = await createTenants(app));
});
afterAll(async () => {
  await app.close();
});

const gql = (as: TestUser, query: string, variables: Record<string, unknown> = {}) => h.gql(app, as, query, variables);
const draft = (files: Record<string, Buffer>, options: h.DraftOptions = {}) => h.draft(app, owner, files, options);
const put = (url: string, data: Buffer | string, headers: Record<string, string> = {}) => h.put(app, url, data, headers);
const commit = (id: string) => h.commit(app, owner, id);

const FILES_MUTATION = 'mutation($input: CreateArtifactFilesInput!) { createArtifactFiles(input: $input) { files { edges { node { uploadUrl } } } } }';

async function upload(files: Record<string, Buffer>, options: h.DraftOptions = {}): Promise<h.Draft> {
  const d = await h.uploadAndCommit(app, owner, files, options);
  expect(d.committed.errors).toBeUndefined();
  return d;
}

describe('artifact uploads', () => {
  it('refuses a forged upload URL with 404 and stores nothing', async () => {
    const before = await databaseFingerprint(app);
    const response = await app.inject({ method: 'PUT', url: '/wandb/artifact-files/forged-token', payload: Buffer.from('x') });
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({ detail: 'upload URL not found' });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('answers a forged upload URL before reading the body, on every upload route', async () => {
    const url = await listen(app);
    for (const route of ['artifact-files', 'manifests', 'run-files']) {
      // The head declares a body near the limit; only a few bytes of it are sent, and the answer comes anyway.
      const answer = await new Promise<string>((resolve) => {
        const socket = net.connect({ host: '127.0.0.1', port: Number(new URL(url).port) });
        let received = '';
        socket.on('data', (chunk) => {
          received += chunk.toString('latin1');
          if (received.includes('\r\n\r\n') && received.endsWith('}')) {
            socket.destroy();
            resolve(received);
          }
        });
        socket.write(`PUT /wandb/${route}/forged-token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\nxxxx`);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 404 Not Found\r\n/);
      expect(answer.endsWith('{"detail":"upload URL not found"}')).toBe(true);
    }
  });

  it('refuses bytes whose MD5 is not the one announced for the file, storing nothing', async () => {
    const d = await draft({ 'train.jsonl': Buffer.from('{"messages": []}\n') });
    const before = await databaseFingerprint(app);
    const wrong = Buffer.from('{"messages": [1]}\n');
    const response = await put(d.uploadUrls[0]!, wrong);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ detail: `The uploaded bytes have MD5 ${b64md5(wrong)}, not the ${b64md5('{"messages": []}\n')} announced for this file.` });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('refuses a Content-MD5 header that does not match the bytes', async () => {
    const data = Buffer.from('abc');
    const d = await draft({ 'a.txt': data });
    const response = await put(d.uploadUrls[0]!, data, { 'content-md5': b64md5('abd') });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ detail: `The uploaded bytes have MD5 ${b64md5(data)}, not the Content-MD5 ${b64md5('abd')}.` });
  });

  it('refuses a file over the body limit with 413, storing nothing', async () => {
    const big = Buffer.alloc(1024 * 1024 + 1, 7);
    const d = await draft({ 'big.bin': big });
    const before = await databaseFingerprint(app);
    const response = await put(d.uploadUrls[0]!, big);
    expect(response.statusCode).toBe(413);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('refuses path-traversing file names in createArtifactFiles and in the manifest', async () => {
    const d = await draft({ 'ok.txt': Buffer.from('ok') });
    const before = await databaseFingerprint(app);
    for (const name of ['../escape.txt', '/etc/passwd', 'a/./b', 'a\\b']) {
      const answer = await gql(owner, 'mutation($input: CreateArtifactFilesInput!) { createArtifactFiles(input: $input) { files { edges { node { uploadUrl } } } } }', {
        input: { storageLayout: 'V2', artifactFiles: [{ artifactID: d.id, name, md5: b64md5('x') }] },
      });
      expect(answer.errors![0].message).toBe(`Invalid artifact file path ${JSON.stringify(name)}: a relative path of at most 512 characters without '.' or '..' segments.`);
    }
    const manifest = JSON.stringify(manifestOf({ '../escape.txt': { digest: b64md5('ok'), size: 2 } }));
    const response = await put(d.manifestUrl, manifest);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ detail: 'Invalid artifact file path "../escape.txt": a relative path of at most 512 characters without \'.\' or \'..\' segments.' });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('writes no file of a createArtifactFiles call an item of which is refused', async () => {
    const d = await draft({ 'ok.txt': Buffer.from('ok') });
    const before = await databaseFingerprint(app);
    const answer = await gql(owner, FILES_MUTATION, {
      input: { storageLayout: 'V2', artifactFiles: [{ artifactID: d.id, name: 'written.txt', md5: b64md5('w') }, { artifactID: 'QXJ0aWZhY3Q6OTk5OTk5', name: 'b.txt', md5: b64md5('b') }] },
    });
    expect(answer.errors![0].message).toBe('Artifact "QXJ0aWZhY3Q6OTk5OTk5" not found.');
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('answers each item of a large createArtifactFiles call, a name given twice keeping its last md5', async () => {
    const d = await draft({ 'ok.txt': Buffer.from('ok') });
    const names = Array.from({ length: 2500 }, (_, i) => `shard-${i}.bin`);
    const artifactFiles = [...names.map((name) => ({ artifactID: d.id, name, md5: b64md5(name) })), { artifactID: d.id, name: 'shard-7.bin', md5: b64md5('again') }];
    const answer = await gql(owner, FILES_MUTATION, { input: { storageLayout: 'V2', artifactFiles } });
    expect(answer.errors).toBeUndefined();
    const urls: (string | null)[] = answer.data!.createArtifactFiles.files.edges.map((e: any) => e.node.uploadUrl);
    expect(urls).toHaveLength(2501);
    // The same file, whichever item named it: one upload URL, which takes the last md5's bytes.
    expect(urls[2500]).toBe(urls[7]);
    expect(new Set(urls).size).toBe(2500);
    expect((await put(urls[7]!, 'again')).statusCode).toBe(200);
    expect((await put(urls[8]!, 'shard-8.bin')).statusCode).toBe(200);
  });

  it('does not commit an artifact whose files were not all uploaded', async () => {
    const data = Buffer.from('never sent');
    const d = await draft({ 'missing.txt': data });
    await put(d.manifestUrl, JSON.stringify(manifestOf({ 'missing.txt': { digest: b64md5(data), size: data.length } })));
    const answer = await commit(d.id);
    expect(answer.errors![0].message).toBe(`Artifact ${d.id}: file "missing.txt" was never uploaded.`);
  });

  it('does not commit an artifact whose manifest is not the one its digest names', async () => {
    const data = Buffer.from('one');
    const d = await draft({ 'one.txt': data });
    await put(d.uploadUrls[0]!, data);
    const extra = Buffer.from('two');
    expect((await put(d.manifestUrl, JSON.stringify(manifestOf({ 'one.txt': { digest: b64md5(data), size: 3 }, 'two.txt': { digest: b64md5(extra), size: 3 } })))).statusCode).toBe(400);
    const answer = await commit(d.id);
    expect(answer.errors![0].message).toBe(`Artifact ${d.id} has no manifest yet: upload it before committing.`);
  });

  it('skips the upload of bytes the entity already holds (uploadUrl null) and dedups an identical version', async () => {
    const files = { 'w.bin': Buffer.from('weights') };
    const first = await upload(files, { aliases: ['step1'] });
    const contents = { 'w.bin': { digest: b64md5('weights') } };
    const again = await gql(owner, 'mutation($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id state aliases { alias } } } }', {
      input: { entityName: owner.entity, projectName: first.project, artifactCollectionName: 'data', artifactTypeName: 'dataset', digest: manifestDigest(contents), aliases: [{ alias: 'step2', artifactCollectionName: 'data' }] },
    });
    expect(again.data!.createArtifact.artifact).toEqual({ id: first.id, state: 'COMMITTED', aliases: [{ alias: 'v0' }, { alias: 'latest' }, { alias: 'step1' }, { alias: 'step2' }] });
    const second = await draft({ 'w.bin': Buffer.from('weights'), 'x.txt': Buffer.from('new') }, { project: first.project });
    expect(second.uploadUrls[0]).toBeNull();
    expect(second.uploadUrls[1]).toMatch(/\/wandb\/artifact-files\//);
  });
});

describe('artifact lookups', () => {
  const membership = `query($entity: String!, $project: String!, $name: String!) { project(name: $project, entityName: $entity) { artifactCollectionMembership(name: $name) {
    versionIndex aliases { alias } artifact { id state artifactType { name } } files { edges { node { name directUrl } } } } } }`;

  it('resolves vN, aliases and latest, and serves the files without a key at their directUrl', async () => {
    const data = Buffer.from('{"messages": []}\n');
    const d = await upload({ 'train.jsonl': data }, { aliases: ['step3'] });
    for (const name of ['data:v0', 'data:step3', 'data:latest', 'data']) {
      const answer = await gql(owner, membership, { entity: owner.entity, project: d.project, name });
      const m = answer.data!.project.artifactCollectionMembership;
      expect(m.versionIndex, name).toBe(0);
      expect(m.aliases.map((a: { alias: string }) => a.alias)).toEqual(['v0', 'latest', 'step3']);
      const file = m.files.edges[0].node;
      expect(file.name).toBe('train.jsonl');
      const download = await app.inject({ method: 'GET', url: pathOf(file.directUrl) });
      expect(download.statusCode).toBe(200);
      expect(download.rawPayload.equals(data)).toBe(true);
    }
    const missing = await gql(owner, membership, { entity: owner.entity, project: d.project, name: 'data:v1' });
    expect(missing).toEqual({ data: { project: { artifactCollectionMembership: null } } });
  });

  it('shows another tenant nothing: no artifact by id, no project, no run stream', async () => {
    const d = await upload({ 'secret.txt': Buffer.from('secret') });
    const byId = await gql(other, 'query($id: ID!) { artifact(id: $id) { id } }', { id: d.id });
    expect(byId).toEqual({ data: { artifact: null } });
    const byName = await gql(other, membership, { entity: owner.entity, project: d.project, name: 'data:v0' });
    expect(byName).toEqual({ data: { project: null }, errors: [{ message: `This API key cannot reach entity "${owner.entity}".`, path: ['project'] }] });
    const commitOther = await gql(other, 'mutation($id: ID!) { updateArtifact(input: {artifactID: $id, metadata: "{}"}) { artifact { id } } }', { id: d.id });
    expect(commitOther.errors![0].message).toBe(`Artifact ${JSON.stringify(d.id)} not found.`);
    await expectOtherTenantRefused(app, jsonRequest('POST', `/files/${owner.entity}/${d.project}/run-1/file_stream`, other, { files: {} }), {
      status: 404,
      body: { detail: `run ${owner.entity}/${d.project}/run-1 not found` },
    });
  });
});

describe('the rest of W&B', () => {
  it('advertises only the features that keep the SDK on the membership queries', async () => {
    const answer = await gql(owner, '{ serverInfo { features { name isEnabled } } }');
    expect(answer.data!.serverInfo.features).toEqual([
      { name: 'PROJECT_ARTIFACT_COLLECTION_MEMBERSHIP', isEnabled: true },
      { name: 'ARTIFACT_COLLECTION_MEMBERSHIP_FILES', isEnabled: true },
      { name: 'ARTIFACT_COLLECTION_MEMBERSHIP_FILE_DOWNLOAD_HANDLER', isEnabled: true },
    ]);
  });

  it('answers no CoreWeave organization, so wandb-core never asks CoreWeave\'s metadata host', async () => {
    const answer = await gql(owner, 'query($e: String!) { entity(name: $e) { organization { coreWeaveOrganizationId } } }', { e: owner.entity });
    expect(answer).toEqual({ data: { entity: { organization: null } } });
  });

  it('names an operation outside the subset in its GraphQL error', async () => {
    const answer = await gql(owner, 'mutation { linkArtifact(input: {}) { versionIndex } }');
    expect(answer).toEqual({
      errors: [{ message: 'Cannot query field "linkArtifact" on type "Mutation". trainyard serves only the part of W&B\'s GraphQL API that the weave and wandb SDKs use (docs/training.md, "W&B API").' }],
    });
  });
});

describe('SFT jobs from wandb-artifact URLs', () => {
  async function sftJob(as: TestUser, url: string) {
    const model = await app.inject(jsonRequest('POST', '/v1/preview/models', owner, { project: 'sft', name: uniqueName('m'), base_model: 'Qwen/Qwen2.5-0.5B-Instruct' }));
    return app.inject(jsonRequest('POST', '/v1/preview/sft-training-jobs', as, { model_id: model.json().id, training_data_url: url }));
  }

  it('refuses a URL naming no artifact, a non-dataset artifact, or one without train.jsonl, with 422', async () => {
    const lora = await upload({ 'adapter_model.safetensors': Buffer.from('w') }, { type: 'model', name: 'ckpt' });
    const nojsonl = await upload({ 'other.jsonl': Buffer.from('{}\n') }, { name: 'nojsonl' });
    const cases: [string, string][] = [
      [`wandb-artifact:///${owner.entity}/${lora.project}/nothing:v0`, `artifact ${owner.entity}/${lora.project}/nothing:v0 not found`],
      [`wandb-artifact:///${owner.entity}/${lora.project}/ckpt:v0`, `artifact ${owner.entity}/${lora.project}/ckpt is of type "model", not "dataset"`],
      [`wandb-artifact:///${owner.entity}/${nojsonl.project}/nojsonl:latest`, `artifact ${owner.entity}/${nojsonl.project}/nojsonl:latest has no train.jsonl`],
    ];
    for (const [url, why] of cases) {
      const response = await sftJob(owner, url);
      expect(response.statusCode, url).toBe(422);
      expect(response.json().detail[0].msg).toBe(`Value error, training_data_url ${url} cannot be used: ${why}`);
    }
  });

  it('refuses another entity\'s artifact with 403', async () => {
    const d = await upload({ 'train.jsonl': Buffer.from('{"messages": [{"role": "user", "content": "hi"}]}\n') });
    const model = await app.inject(jsonRequest('POST', '/v1/preview/models', other, { project: 'sft', name: uniqueName('m'), base_model: 'Qwen/Qwen2.5-0.5B-Instruct' }));
    const response = await app.inject(
      jsonRequest('POST', '/v1/preview/sft-training-jobs', other, { model_id: model.json().id, training_data_url: `wandb-artifact:///${owner.entity}/${d.project}/data:v0` }),
    );
    expect(response.statusCode).toBe(403);
    expect(response.json()).toEqual({ detail: `This API key cannot reach entity "${owner.entity}".` });
  });
});

describe('a manifest uploaded again', () => {
  it('replaces the last one, whose bytes go unless something else names them', async () => {
    const files = { 'a.txt': Buffer.from(`a ${uniqueName('x')}`) };
    const created = await h.createArtifact(app, owner, files, { project: uniqueName('p') });
    const id = created.data!.createArtifact.artifact.id as string;
    // No digest announced: the manifest URL takes whatever manifest is sent, until the commit.
    const unannounced = await gql(
      owner,
      'mutation($id: ID!) { createArtifactManifest(input: {artifactID: $id, name: "wandb_manifest.json", digest: "", entityName: "e", projectName: "p", runName: "r", type: FULL}) { artifactManifest { file { uploadUrl } } } }',
      { id },
    );
    const url = unannounced.data!.createArtifactManifest.artifactManifest.file.uploadUrl as string;
    const uploads = await gql(owner, FILES_MUTATION, { input: { storageLayout: 'V2', artifactFiles: [{ artifactID: id, name: 'a.txt', md5: b64md5(files['a.txt']) }] } });
    const fileUrl = uploads.data!.createArtifactFiles.files.edges[0].node.uploadUrl as string;
    const manifests = [JSON.stringify(manifestOf({ 'other.txt': { digest: b64md5('x'), size: 1 } })), JSON.stringify(manifestOf(h.contentsOf(files)))];
    const md5 = (text: string) => Buffer.from(b64md5(text), 'base64').toString('hex');
    for (const manifest of manifests) expect((await put(url, manifest)).statusCode).toBe(200);
    const rows = await app.db.selectFrom('wandb_blobs').select('md5').where('entity', '=', owner.entity).where('md5', 'in', manifests.map(md5)).execute();
    expect(rows.map((row) => row.md5)).toEqual([md5(manifests[1])]);
    expect((await put(fileUrl, files['a.txt'])).statusCode).toBe(200);
    expect((await commit(id)).errors).toBeUndefined();
  });
});

/** wandb 0.31's AddAliases and DeleteAliases (sdk/artifacts/_generated/operations.py), as artifact.save() sends them. */
const ADD_ALIASES = 'mutation AddAliases($input: AddAliasesInput!) { result: addAliases(input: $input) { success } }';
const DELETE_ALIASES = 'mutation DeleteAliases($input: DeleteAliasesInput!) { result: deleteAliases(input: $input) { success } }';
const ALIASES_BY_ID = 'query($id: ID!) { artifact(id: $id) { aliases { alias } } }';
const TAGS_BY_ID = 'query($id: ID!) { artifact(id: $id) { tags { name } } }';

describe('artifact tags', () => {
  it('keeps the tags given at creation, with the attributes wandb 0.31 sends, and those saved later', async () => {
    const files = { 'a.txt': Buffer.from(`tagged ${uniqueName('x')}`) };
    const project = uniqueName('p');
    const created = await gql(owner, 'mutation($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id tags { name } } } }', {
      input: {
        entityName: owner.entity,
        projectName: project,
        artifactCollectionName: 'tagged',
        artifactTypeName: 'dataset',
        digest: manifestDigest(h.contentsOf(files)),
        tags: [{ tagName: 'gold', attributes: null }, { tagName: 'hand labelled' }],
      },
    });
    expect(created).toEqual({ data: { createArtifact: { artifact: { id: expect.any(String), tags: [{ name: 'gold' }, { name: 'hand labelled' }] } } } });
    const { id } = created.data!.createArtifact.artifact;
    // artifact.tags.append("silver"); artifact.tags.remove("gold"); artifact.save()
    const saved = await gql(owner, 'mutation($input: UpdateArtifactInput!) { updateArtifact(input: $input) { artifact { tags { name } } } }', {
      input: { artifactID: id, description: null, metadata: '{}', tagsToAdd: [{ tagName: 'silver' }], tagsToDelete: [{ tagName: 'gold' }] },
    });
    expect(saved).toEqual({ data: { updateArtifact: { artifact: { tags: [{ name: 'hand labelled' }, { name: 'silver' }] } } } });
    expect(await gql(owner, TAGS_BY_ID, { id })).toEqual({ data: { artifact: { tags: [{ name: 'hand labelled' }, { name: 'silver' }] } } });
  });

  it('refuses a tag W&B would refuse, and more than 32 tags, changing nothing', async () => {
    const d = await upload({ 'a.txt': Buffer.from(`refused tags ${uniqueName('x')}`) });
    const cases: [unknown[], string][] = [
      [[{ tagName: 'no/slash' }], 'Invalid artifact tag "no/slash": 1 to 128 letters, digits, \'-\' and \'_\', in words separated by spaces.'],
      [[{ tagName: 't'.repeat(129) }], `Invalid artifact tag "${'t'.repeat(129)}": 1 to 128 letters, digits, '-' and '_', in words separated by spaces.`],
      [Array.from({ length: 33 }, (_, i) => ({ tagName: `t${i}` })), 'An artifact has at most 32 tags.'],
    ];
    for (const [tagsToAdd, message] of cases) {
      const before = await databaseFingerprint(app);
      const answer = await gql(owner, 'mutation($input: UpdateArtifactInput!) { updateArtifact(input: $input) { artifact { id } } }', { input: { artifactID: d.id, tagsToAdd } });
      expect(answer).toEqual({ data: { updateArtifact: null }, errors: [{ message, path: ['updateArtifact'] }] });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
  });
});

describe('artifact aliases edited after the commit', () => {
  const aliasInput = (project: string, alias: string, overrides: Record<string, string> = {}) => ({ alias, artifactCollectionName: 'data', entityName: owner.entity, projectName: project, ...overrides });
  const aliasesOf = async (id: string) => (await gql(owner, ALIASES_BY_ID, { id })).data!.artifact.aliases.map((a: { alias: string }) => a.alias);

  it('moves an alias addAliases gives a version from the version that held it, and deleteAliases takes one off', async () => {
    const project = uniqueName('p');
    const first = await upload({ 'a.txt': Buffer.from('first') }, { project, aliases: ['candidate'] });
    const second = await upload({ 'a.txt': Buffer.from('second') }, { project });
    expect(await gql(owner, ADD_ALIASES, { input: { artifactID: second.id, aliases: [aliasInput(project, 'candidate'), aliasInput(project, 'production')] } })).toEqual({ data: { result: { success: true } } });
    expect(await aliasesOf(first.id)).toEqual(['v0']);
    expect(await aliasesOf(second.id)).toEqual(['v1', 'candidate', 'latest', 'production']);
    expect(await gql(owner, DELETE_ALIASES, { input: { artifactID: second.id, aliases: [aliasInput(project, 'candidate')] } })).toEqual({ data: { result: { success: true } } });
    expect(await aliasesOf(second.id)).toEqual(['v1', 'latest', 'production']);
  });

  it('refuses to delete latest, an alias of another collection or project, and another tenant\'s artifact, changing nothing', async () => {
    const project = uniqueName('p');
    const d = await upload({ 'a.txt': Buffer.from(`refused aliases ${project}`) }, { project });
    await gql(other, '{ viewer { id } }');
    const cases: [TestUser, string, Record<string, unknown>, string][] = [
      [owner, DELETE_ALIASES, aliasInput(project, 'latest'), 'The alias "latest" always names the newest version: it cannot be deleted.'],
      [owner, ADD_ALIASES, aliasInput(project, 'best', { artifactCollectionName: 'other' }), 'Alias "best" names collection "other", not "data".'],
      [owner, ADD_ALIASES, aliasInput(project, 'best', { projectName: 'elsewhere' }), `Alias "best" names project "${owner.entity}/elsewhere", not "${owner.entity}/${project}".`],
      [owner, ADD_ALIASES, aliasInput(project, 'v7'), 'Invalid alias "v7": 1 to 128 letters, digits, \'.\', \'_\' and \'-\', and not a version (vN).'],
      [other, ADD_ALIASES, aliasInput(project, 'best'), `Artifact ${JSON.stringify(d.id)} not found.`],
    ];
    for (const [as, mutation, alias, message] of cases) {
      const before = await databaseFingerprint(app);
      expect(await gql(as, mutation, { input: { artifactID: d.id, aliases: [alias] } })).toEqual({ data: { result: null }, errors: [{ message, path: ['result'] }] });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
    expect(await aliasesOf(d.id)).toEqual(['v0', 'latest']);

    // latest cannot be moved back to an older version; added where it already is, it changes nothing.
    const newer = await upload({ 'a.txt': Buffer.from(`refused aliases, second version ${project}`) }, { project });
    const before = await databaseFingerprint(app);
    expect(await gql(owner, ADD_ALIASES, { input: { artifactID: d.id, aliases: [aliasInput(project, 'latest')] } })).toEqual({
      data: { result: null },
      errors: [{ message: 'The alias "latest" always names the newest version: it cannot be moved to another.', path: ['result'] }],
    });
    expect(await gql(owner, ADD_ALIASES, { input: { artifactID: newer.id, aliases: [aliasInput(project, 'latest')] } })).toEqual({ data: { result: { success: true } } });
    expect(await databaseFingerprint(app)).toEqual(before);
    expect([await aliasesOf(d.id), await aliasesOf(newer.id)]).toEqual([['v0'], ['v1', 'latest']]);
  });
});
