import { createHash } from 'node:crypto';
import type { Principal } from '../auth/principal.js';
import type { ArtifactRow, ArtifactWithCollection, CollectionRow, ProjectScope, RunRow } from '../wandb/repository.js';
import { encodeId, FEATURES, WandbRequestError, type WandbService } from '../wandb/service.js';
import { PAGE_SIZE } from './limits.js';

/**
 * The values the GraphQL engine walks: the root fields, and one small object per W&B type whose
 * properties are values or functions of the field's arguments (graphql-js calls them). Anything not
 * reachable with the caller's key resolves to null, as a missing object does in W&B.
 */

export interface GraphQLContext {
  principal: Principal;
  wandb: WandbService;
  /** This server's origin as the client reached it: upload and download URLs point back here. */
  baseUrl: string;
}

type Args = Record<string, unknown>;


function str(args: Args, name: string): string | null {
  const value = args[name];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new WandbRequestError(`Argument "${name}" must be a string.`);
  return value;
}

function requiredStr(args: Args, name: string): string {
  const value = str(args, name);
  if (value === null) throw new WandbRequestError(`Argument "${name}" is required.`);
  return value;
}

/** W&B's timestamps: UTC, seconds, no zone suffix. */
function timestamp(date: Date | null): string | null {
  return date ? date.toISOString().slice(0, 19) : null;
}

/** A stable number for a project (projects have no table: they exist through what is stored in them). */
function projectNumber(scope: ProjectScope): number {
  return createHash('sha256').update(`${scope.entity}/${scope.project}`).digest().readUIntBE(0, 6);
}

function page(args: Args): { offset: number; limit: number } {
  const after = str(args, 'after');
  const offset = after === null ? 0 : Number(after);
  if (!Number.isSafeInteger(offset) || offset < 0) throw new WandbRequestError(`Invalid cursor ${JSON.stringify(after!.slice(0, 100))}.`);
  // The SDK asks for 50 versions and 5,000 files a page.
  const first = typeof args.first === 'number' ? args.first : PAGE_SIZE.default;
  return { offset, limit: Math.max(1, Math.min(first, PAGE_SIZE.max)) };
}

function pageInfo(offset: number, count: number, total: number) {
  const end = offset + count;
  return { __typename: 'PageInfo', startCursor: String(offset), endCursor: count ? String(end) : null, hasNextPage: end < total, hasPreviousPage: offset > 0 };
}

function entityNode(name: string) {
  return { id: encodeId('Entity', projectNumber({ entity: name, project: '' })), name, organization: null };
}

function userNode(ctx: GraphQLContext) {
  const p = ctx.principal;
  return {
    id: p.userId,
    name: p.username,
    username: p.username,
    email: null,
    entity: p.entity,
    admin: p.isAdmin,
    flags: null,
    photoUrl: null,
    deletedAt: null,
    defaultFramework: null,
    defaultEntity: entityNode(p.entity),
    teams: { edges: [...p.entities].filter((e) => e !== p.entity).sort().map((e) => ({ node: entityNode(e) })) },
    apiKeys: null,
  };
}

function projectNode(ctx: GraphQLContext, scope: ProjectScope) {
  const n = projectNumber(scope);
  return {
    id: encodeId('Project', n),
    internalId: String(n),
    name: scope.project,
    entityName: scope.entity,
    description: null,
    entity: entityNode(scope.entity),
    bucket: async (args: Args) => runOrNull(ctx, scope, requiredStr(args, 'name')),
    run: async (args: Args) => runOrNull(ctx, scope, requiredStr(args, 'name')),
    artifact: async (args: Args) => {
      const found = await ctx.wandb.membership(ctx.principal, scope, requiredStr(args, 'name'));
      return found ? artifactNode(ctx, found) : null;
    },
    artifactType: (args: Args) => {
      const type = requiredStr(args, 'name');
      return {
        id: null,
        name: type,
        artifactCollection: async (a: Args) => {
          const collection = await ctx.wandb.collection(ctx.principal, scope, requiredStr(a, 'name'));
          return collection && collection.type === type ? collectionNode(ctx, collection) : null;
        },
        artifact: async (a: Args) => {
          const found = await ctx.wandb.membership(ctx.principal, scope, requiredStr(a, 'name'));
          return found && found.collection.type === type ? artifactNode(ctx, found) : null;
        },
      };
    },
    artifactCollection: async (args: Args) => {
      const collection = await ctx.wandb.collection(ctx.principal, scope, requiredStr(args, 'name'));
      return collection ? collectionNode(ctx, collection) : null;
    },
    artifactCollectionMembership: async (args: Args) => {
      const found = await ctx.wandb.membership(ctx.principal, scope, requiredStr(args, 'name'));
      return found ? membershipNode(ctx, found) : null;
    },
  };
}

async function runOrNull(ctx: GraphQLContext, scope: ProjectScope, name: string) {
  const run = await ctx.wandb.findRun(ctx.principal, scope, name);
  return run ? runNode(ctx, run) : null;
}

/** A JSONString argument or stored field as an object ({} for anything else); text that is not JSON is the client's mistake. */
function parseObject(text: string | null, what = 'A JSONString'): Record<string, unknown> {
  if (!text) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new WandbRequestError(`${what} is not valid JSON.`);
  }
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

function runNode(ctx: GraphQLContext, run: RunRow) {
  const scope = { entity: run.entity, project: run.project };
  const config = parseObject(run.config);
  return {
    id: encodeId('Run', run.id),
    name: run.name,
    displayName: run.display_name,
    description: null,
    notes: run.notes,
    config: run.config ?? '{}',
    summaryMetrics: run.summary ?? '{}',
    systemMetrics: null,
    // The SDK treats a run as one to resume only when this holds the telemetry `t` it sent in config.
    wandbConfig: (args: Args) => {
      const wandb = (config._wandb as { value?: Record<string, unknown> } | undefined)?.value ?? {};
      const keys = Array.isArray(args.keys) ? (args.keys as string[]) : Object.keys(wandb);
      const picked = Object.fromEntries(keys.filter((k) => k in wandb).map((k) => [k, wandb[k]]));
      return Object.keys(picked).length ? JSON.stringify(picked) : null;
    },
    sweepName: null,
    state: run.completed_at ? (run.exitcode === 0 || run.exitcode === null ? 'finished' : 'failed') : 'running',
    group: run.group_name,
    jobType: run.job_type,
    commit: null,
    readOnly: false,
    tags: run.tags,
    project: projectNode(ctx, scope),
    projectId: String(projectNumber(scope)),
    user: userNode(ctx),
    createdAt: timestamp(run.created_at),
    heartbeatAt: timestamp(run.updated_at),
    logLineCount: 0,
    historyLineCount: run.history_line_count,
    eventsLineCount: 0,
    historyTail: async () => JSON.stringify(await ctx.wandb.historyTail(run)),
    eventsTail: '[]',
    historyKeys: null,
  };
}

function collectionNode(ctx: GraphQLContext, collection: CollectionRow) {
  const scope = { entity: collection.entity, project: collection.project };
  return {
    __typename: 'ArtifactSequence',
    id: encodeId('ArtifactSequence', collection.id),
    name: collection.name,
    project: projectNode(ctx, scope),
    defaultArtifactType: { id: null, name: collection.type },
    latestArtifact: async () => {
      const latest = await ctx.wandb.latest(collection);
      return latest ? artifactNode(ctx, { artifact: latest, collection }) : null;
    },
    artifacts: async (args: Args) => {
      const filters = str(args, 'filters');
      if (filters !== null && JSON.stringify(parseObject(filters, 'Argument "filters"')) !== '{"state":"COMMITTED"}' && filters.trim() !== '{}') {
        throw new WandbRequestError('Only the filter {"state": "COMMITTED"} is supported on artifact versions.');
      }
      const { offset, limit } = page(args);
      const { rows, total } = await ctx.wandb.versions(collection, { offset, limit });
      const aliases = await ctx.wandb.aliases(rows);
      return {
        totalCount: total,
        pageInfo: pageInfo(offset, rows.length, total),
        edges: rows.map((artifact, i) => ({ version: `v${artifact.version_index}`, cursor: String(offset + i + 1), node: artifactNode(ctx, { artifact, collection }, aliases.get(artifact.id)) })),
      };
    },
    artifactMembership: async (args: Args) => {
      const artifact = await ctx.wandb.version(collection, requiredStr(args, 'aliasName'));
      return artifact ? membershipNode(ctx, { artifact, collection }) : null;
    },
  };
}

function aliasNodes(ctx: GraphQLContext, collection: CollectionRow, artifact: ArtifactRow, aliases: string[]) {
  return aliases.map((alias) => ({ __typename: 'ArtifactAlias', id: encodeId('ArtifactAlias', artifact.id) + `:${alias}`, alias, artifactCollection: collectionNode(ctx, collection) }));
}

async function filesConnection(ctx: GraphQLContext, artifact: ArtifactRow, args: Args) {
  const { offset, limit } = page(args);
  const all = artifact.state === 'COMMITTED' ? await ctx.wandb.files(artifact) : [];
  const files = all.slice(offset, offset + limit);
  return {
    pageInfo: pageInfo(offset, files.length, all.length),
    edges: files.map((file, i) => ({
      cursor: String(offset + i + 1),
      node: {
        __typename: 'File',
        id: encodeId('File', artifact.id) + `:${file.name}`,
        name: file.name,
        directUrl: `${ctx.baseUrl}/wandb/artifact-files/${file.token}`,
        url: `${ctx.baseUrl}/wandb/artifact-files/${file.token}`,
        md5: file.md5,
        sizeBytes: file.size,
        uploadUrl: null,
        uploadHeaders: null,
        storagePath: null,
        uploadMultipartUrls: null,
        artifact: null,
      },
    })),
  };
}

function artifactNode(ctx: GraphQLContext, { artifact, collection }: ArtifactWithCollection, knownAliases?: string[]) {
  const aliases = knownAliases ? Promise.resolve(knownAliases) : undefined;
  const sequence = collectionNode(ctx, collection);
  return {
    __typename: 'Artifact',
    id: encodeId('Artifact', artifact.id),
    artifactSequence: sequence,
    versionIndex: artifact.version_index,
    artifactType: { id: null, name: collection.type },
    description: artifact.description,
    metadata: artifact.metadata,
    ttlDurationSeconds: -1,
    ttlIsInherited: true,
    tags: artifact.tags.map((name) => ({ id: encodeId('ArtifactTag', artifact.id) + `:${name}`, name })),
    historyStep: null,
    state: artifact.state,
    size: artifact.size,
    digest: artifact.digest,
    commitHash: null,
    fileCount: artifact.file_count,
    createdAt: timestamp(artifact.created_at),
    updatedAt: timestamp(artifact.updated_at),
    aliases: async () => aliasNodes(ctx, collection, artifact, (await (aliases ?? ctx.wandb.aliases([artifact]).then((m) => m.get(artifact.id)!)))),
    currentManifest:
      artifact.state === 'COMMITTED'
        ? { id: encodeId('ArtifactManifest', artifact.id), file: { id: encodeId('File', artifact.id), name: 'wandb_manifest.json', directUrl: `${ctx.baseUrl}/wandb/manifests/${artifact.manifest_token}` } }
        : null,
    files: (args: Args) => filesConnection(ctx, artifact, args),
  };
}

function membershipNode(ctx: GraphQLContext, found: ArtifactWithCollection) {
  const { artifact, collection } = found;
  return {
    __typename: 'ArtifactCollectionMembership',
    id: encodeId('ArtifactCollectionMembership', artifact.id),
    versionIndex: artifact.version_index,
    createdAt: timestamp(artifact.created_at),
    aliases: async () => aliasNodes(ctx, collection, artifact, (await ctx.wandb.aliases([artifact])).get(artifact.id)!),
    artifactCollection: collectionNode(ctx, collection),
    artifact: artifactNode(ctx, found),
    files: (args: Args) => filesConnection(ctx, artifact, args),
  };
}

function input(args: Args): Args {
  const value = args.input;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new WandbRequestError('Argument "input" must be an object.');
  return value as Args;
}

/** The root value: one function per Query and Mutation field. */
export const rootValue = {
  viewer: (_args: Args, ctx: GraphQLContext) => userNode(ctx),
  serverInfo: () => ({ features: FEATURES.map((name) => ({ name, isEnabled: true })) }),
  model: (args: Args, ctx: GraphQLContext) => projectNode(ctx, ctx.wandb.scope(ctx.principal, str(args, 'entityName'), str(args, 'name'))),
  project: (args: Args, ctx: GraphQLContext) => projectNode(ctx, ctx.wandb.scope(ctx.principal, str(args, 'entityName'), str(args, 'name'))),
  // A non-empty CoreWeave organization id sends wandb-core to CoreWeave's metadata host: always none here.
  entity: (args: Args, ctx: GraphQLContext) => {
    const name = requiredStr(args, 'name');
    return ctx.principal.entities.has(name) ? entityNode(name) : null;
  },
  artifact: async (args: Args, ctx: GraphQLContext) => {
    const found = await ctx.wandb.artifactById(ctx.principal, requiredStr(args, 'id'));
    return found ? artifactNode(ctx, found) : null;
  },

  upsertModel: (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const scope = ctx.wandb.scope(ctx.principal, requiredStr(i, 'entityName'), requiredStr(i, 'name'));
    // Projects come into being with what is stored in them: nothing to write.
    return { model: { ...projectNode(ctx, scope), description: str(i, 'description') }, inserted: false };
  },
  upsertBucket: async (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const { run, inserted } = await ctx.wandb.upsertRun(ctx.principal, {
      id: str(i, 'id'),
      name: str(i, 'name'),
      entity: str(i, 'entityName'),
      project: str(i, 'modelName'),
      displayName: str(i, 'displayName'),
      jobType: str(i, 'jobType'),
      config: str(i, 'config'),
      summaryMetrics: str(i, 'summaryMetrics'),
      host: str(i, 'host'),
      tags: i.tags as string[] | null | undefined,
      notes: str(i, 'notes'),
      group: str(i, 'groupName'),
    });
    return { bucket: runNode(ctx, run), inserted };
  },
  createRunFiles: async (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const { run, files } = await ctx.wandb.createRunFiles(ctx.principal, {
      entity: requiredStr(i, 'entityName'),
      project: requiredStr(i, 'projectName'),
      run: requiredStr(i, 'runName'),
      files: i.files as string[],
    });
    return { runID: encodeId('Run', run.id), uploadHeaders: [], files: files.map((f) => ({ name: f.name, uploadUrl: `${ctx.baseUrl}/wandb/run-files/${f.token}` })) };
  },
  createArtifact: async (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const created = await ctx.wandb.createArtifact(ctx.principal, {
      entityName: requiredStr(i, 'entityName'),
      projectName: requiredStr(i, 'projectName'),
      artifactCollectionName: requiredStr(i, 'artifactCollectionName'),
      artifactTypeName: requiredStr(i, 'artifactTypeName'),
      digest: requiredStr(i, 'digest'),
      description: str(i, 'description'),
      metadata: str(i, 'metadata'),
      runName: str(i, 'runName'),
      storageRegion: str(i, 'storageRegion'),
      aliases: i.aliases as { alias: string; artifactCollectionName: string }[] | null,
      tags: i.tags as { tagName: string }[] | null,
    });
    return { artifact: artifactNode(ctx, created) };
  },
  createArtifactManifest: async (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const { artifact } = await ctx.wandb.createManifest(ctx.principal, { artifactID: requiredStr(i, 'artifactID'), digest: requiredStr(i, 'digest') });
    return {
      artifactManifest: {
        id: encodeId('ArtifactManifest', artifact.id),
        file: { id: encodeId('File', artifact.id), name: 'wandb_manifest.json', uploadUrl: `${ctx.baseUrl}/wandb/manifests/${artifact.manifest_token}`, uploadHeaders: [], directUrl: '' },
      },
    };
  },
  createArtifactFiles: async (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const specs = (i.artifactFiles as Args[]).map((f) => ({ artifactID: requiredStr(f, 'artifactID'), name: requiredStr(f, 'name'), md5: requiredStr(f, 'md5') }));
    const uploads = await ctx.wandb.createArtifactFiles(ctx.principal, specs);
    return {
      files: {
        pageInfo: pageInfo(0, uploads.length, uploads.length),
        // One edge per requested file, in order: the SDK pairs them by position. A null uploadUrl means the bytes are already stored.
        edges: uploads.map((u) => ({
          node: {
            __typename: 'File',
            id: encodeId('File', u.artifact.artifact.id) + `:${u.name}`,
            name: u.name,
            directUrl: '',
            storagePath: null,
            uploadUrl: u.token === null ? null : `${ctx.baseUrl}/wandb/artifact-files/${u.token}`,
            uploadHeaders: [],
            uploadMultipartUrls: null,
            artifact: artifactNode(ctx, u.artifact),
          },
        })),
      },
    };
  },
  commitArtifact: async (args: Args, ctx: GraphQLContext) => {
    const found = await ctx.wandb.commitArtifact(ctx.principal, requiredStr(input(args), 'artifactID'));
    return { artifact: artifactNode(ctx, found) };
  },
  updateArtifact: async (args: Args, ctx: GraphQLContext) => {
    const i = input(args);
    const found = await ctx.wandb.updateArtifact(ctx.principal, {
      artifactID: requiredStr(i, 'artifactID'),
      description: i.description === undefined ? undefined : str(i, 'description'),
      metadata: i.metadata === undefined ? undefined : str(i, 'metadata'),
      aliases: i.aliases as { alias: string; artifactCollectionName: string }[] | null | undefined,
      tagsToAdd: i.tagsToAdd as { tagName: string }[] | null | undefined,
      tagsToDelete: i.tagsToDelete as { tagName: string }[] | null | undefined,
    });
    return { artifact: artifactNode(ctx, found) };
  },
  addAliases: async (args: Args, ctx: GraphQLContext) => changeAliases(args, ctx, true),
  deleteAliases: async (args: Args, ctx: GraphQLContext) => changeAliases(args, ctx, false),
};

async function changeAliases(args: Args, ctx: GraphQLContext, add: boolean) {
  const i = input(args);
  await ctx.wandb.changeAliases(ctx.principal, {
    artifactID: requiredStr(i, 'artifactID'),
    aliases: i.aliases as { alias: string; artifactCollectionName: string; entityName: string; projectName: string }[],
    add,
  });
  return { success: true, clientMutationId: str(i, 'clientMutationId') };
}
