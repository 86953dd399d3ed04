import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import type { App } from '../../src/app.js';
import { manifestDigest } from '../../src/wandb/service.js';
import { uniqueName, type TestUser } from '../helpers/app.js';
import { jsonRequest } from '../helpers/tenants.js';

/** The wandb SDK's artifact traffic (shared/reference/wandb-surface.md §4.2), step by step, for the TS suites. */

export const b64md5 = (data: Buffer | string) => createHash('md5').update(data).digest('base64');

export type GraphQLAnswer = { data?: Record<string, any> | null; errors?: { message: string; path?: unknown[] }[] };

export async function gql(app: App, as: TestUser, query: string, variables: Record<string, unknown> = {}): Promise<GraphQLAnswer> {
  const response = await app.inject(jsonRequest('POST', '/graphql', as, { query, variables }));
  expect(response.statusCode).toBe(200);
  return response.json() as GraphQLAnswer;
}

/** The part of a URL the server minted that the test injects (app.inject takes a path). */
export const pathOf = (url: string) => new URL(url).pathname;

export interface Draft {
  id: string;
  project: string;
  manifestUrl: string;
  uploadUrls: (string | null)[];
}

export interface DraftOptions {
  type?: string;
  project?: string;
  name?: string;
  aliases?: string[];
  metadata?: Record<string, unknown>;
}

export function manifestOf(contents: Record<string, { digest: string; size: number }>) {
  return { version: 1, storagePolicy: 'wandb-storage-policy-v1', storagePolicyConfig: { storageLayout: 'V2' }, contents };
}

export function contentsOf(files: Record<string, Buffer>) {
  return Object.fromEntries(Object.entries(files).map(([path, data]) => [path, { digest: b64md5(data), size: data.length }]));
}

export function createArtifact(app: App, as: TestUser, files: Record<string, Buffer>, options: DraftOptions & { project: string }): Promise<GraphQLAnswer> {
  const name = options.name ?? 'data';
  return gql(app, as, 'mutation($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id state versionIndex aliases { alias } } } }', {
    input: {
      entityName: as.entity,
      projectName: options.project,
      artifactCollectionName: name,
      artifactTypeName: options.type ?? 'dataset',
      digest: manifestDigest(contentsOf(files)),
      metadata: options.metadata ? JSON.stringify(options.metadata) : null,
      aliases: (options.aliases ?? []).map((alias) => ({ alias, artifactCollectionName: name })),
    },
  });
}

/** Steps 5 to 9 of the SDK's upload, up to the point where bytes are PUT. */
export async function draft(app: App, as: TestUser, files: Record<string, Buffer>, options: DraftOptions = {}): Promise<Draft> {
  const project = options.project ?? uniqueName('p');
  const contents = contentsOf(files);
  const created = await createArtifact(app, as, files, { ...options, project });
  expect(created.errors).toBeUndefined();
  const id = created.data!.createArtifact.artifact.id as string;
  const manifest = await gql(
    app,
    as,
    'mutation($id: ID!, $digest: String!) { createArtifactManifest(input: {artifactID: $id, name: "wandb_manifest.json", digest: $digest, entityName: "e", projectName: "p", runName: "r", type: FULL}) { artifactManifest { file { uploadUrl } } } }',
    { id, digest: b64md5(JSON.stringify(manifestOf(contents))) },
  );
  const uploads = await gql(app, as, 'mutation($input: CreateArtifactFilesInput!) { createArtifactFiles(input: $input) { files { edges { node { uploadUrl } } } } }', {
    input: { storageLayout: 'V2', artifactFiles: Object.entries(contents).map(([path, c]) => ({ artifactID: id, name: path, md5: c.digest })) },
  });
  expect(uploads.errors).toBeUndefined();
  return {
    id,
    project,
    manifestUrl: manifest.data!.createArtifactManifest.artifactManifest.file.uploadUrl,
    uploadUrls: uploads.data!.createArtifactFiles.files.edges.map((e: any) => e.node.uploadUrl),
  };
}

export const put = (app: App, url: string, data: Buffer | string, headers: Record<string, string> = {}) => app.inject({ method: 'PUT', url: pathOf(url), payload: data, headers });

export function commit(app: App, as: TestUser, id: string): Promise<GraphQLAnswer> {
  return gql(app, as, 'mutation($id: ID!) { commitArtifact(input: {artifactID: $id}) { artifact { id state versionIndex } } }', { id });
}

/** A draft whose bytes and manifest are uploaded; the answer of its commit is returned beside it. */
export async function uploadAndCommit(app: App, as: TestUser, files: Record<string, Buffer>, options: DraftOptions = {}): Promise<Draft & { committed: GraphQLAnswer }> {
  const d = await draft(app, as, files, options);
  const datas = Object.values(files);
  for (const [i, url] of d.uploadUrls.entries()) if (url) expect((await put(app, url, datas[i])).statusCode).toBe(200);
  expect((await put(app, d.manifestUrl, JSON.stringify(manifestOf(contentsOf(files))))).statusCode).toBe(200);
  return { ...d, committed: await commit(app, as, d.id) };
}
