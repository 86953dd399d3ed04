import { buildSchema } from 'graphql';

/**
 * The subset of W&B's GraphQL schema that trainyard serves: what the weave SDKs ask at init and what the
 * wandb SDK (0.25 to 0.31) sends for runs and artifacts (shared/reference/wandb-surface.md §6). Every
 * field the SDK's documents select is here, even those always null: the SDK fails on a validation
 * error, and its pydantic models need every requested key. Type names are W&B's, because the SDK's
 * documents name them in variable definitions and fragments.
 */
export const SDL = /* GraphQL */ `
scalar JSONString
scalar DateTime
scalar Int64

type Query {
  viewer: User
  serverInfo: ServerInfo
  model(name: String, entityName: String): Project
  project(name: String, entityName: String): Project
  entity(name: String!): Entity
  artifact(id: ID!): Artifact
}

type Mutation {
  upsertModel(input: UpsertModelInput!): UpsertModelPayload
  upsertBucket(input: UpsertBucketInput!): UpsertBucketPayload
  createRunFiles(input: CreateRunFilesInput!): CreateRunFilesPayload
  createArtifact(input: CreateArtifactInput!): CreateArtifactPayload
  createArtifactManifest(input: CreateArtifactManifestInput!): CreateArtifactManifestPayload
  createArtifactFiles(input: CreateArtifactFilesInput!): CreateArtifactFilesPayload
  commitArtifact(input: CommitArtifactInput!): CommitArtifactPayload
  updateArtifact(input: UpdateArtifactInput!): UpdateArtifactPayload
  addAliases(input: AddAliasesInput!): AddAliasesPayload
  deleteAliases(input: DeleteAliasesInput!): DeleteAliasesPayload
}

type User {
  id: ID!
  name: String
  username: String
  email: String
  entity: String
  admin: Boolean
  flags: JSONString
  photoUrl: String
  deletedAt: DateTime
  defaultFramework: String
  defaultEntity: Entity
  teams: EntityConnection
  apiKeys: ApiKeyConnection
}

type ApiKeyConnection { edges: [ApiKeyEdge!]! }
type ApiKeyEdge { node: ApiKey }
type ApiKey { id: ID! name: String description: String }
type EntityConnection { edges: [EntityEdge!]! }
type EntityEdge { node: Entity }

type Entity {
  id: ID!
  name: String!
  organization: Organization
}

type Organization {
  id: ID
  name: String
  coreWeaveOrganizationId: String
}

type ServerInfo { features: [ServerFeature!]! }
type ServerFeature { name: String! isEnabled: Boolean! }

type Project {
  id: ID!
  internalId: ID!
  name: String!
  entityName: String!
  description: String
  entity: Entity!
  bucket(name: String!, missingOk: Boolean): Run
  run(name: String!): Run
  artifact(name: String!): Artifact
  artifactType(name: String!): ArtifactType
  artifactCollection(name: String!): ArtifactCollection
  artifactCollectionMembership(name: String!): ArtifactCollectionMembership
}

type Run {
  id: ID!
  name: String!
  displayName: String
  description: String
  notes: String
  config: JSONString
  summaryMetrics: JSONString
  systemMetrics: JSONString
  wandbConfig(keys: [String!]): JSONString
  sweepName: String
  state: String
  group: String
  jobType: String
  commit: String
  readOnly: Boolean
  tags: [String!]!
  project: Project
  projectId: ID!
  user: User
  createdAt: DateTime
  heartbeatAt: DateTime
  logLineCount: Int
  historyLineCount: Int
  eventsLineCount: Int
  historyTail: JSONString
  eventsTail: JSONString
  historyKeys: JSONString
}

input UpsertModelInput {
  id: String
  name: String
  entityName: String
  description: String
  repo: String
  framework: String
  access: String
  views: JSONString
  linkedGithubRepo: String
  clientMutationId: String
}
type UpsertModelPayload { model: Project inserted: Boolean }

input UpsertBucketInput {
  id: String
  name: String
  groupName: String
  modelName: String
  entityName: String
  description: String
  displayName: String
  notes: String
  config: JSONString
  commit: String
  host: String
  debug: Boolean
  jobProgram: String
  jobRepo: String
  jobType: String
  state: String
  sweep: String
  tags: [String!]
  summaryMetrics: JSONString
  clientMutationId: String
}
type UpsertBucketPayload { bucket: Run inserted: Boolean }

input CreateRunFilesInput {
  entityName: String!
  projectName: String!
  runName: String!
  files: [String!]!
  clientMutationId: String
}
type CreateRunFilesPayload { runID: ID! uploadHeaders: [String!]! files: [UploadFile!]! }
type UploadFile { name: String! uploadUrl: String }

type ArtifactType {
  id: ID
  name: String!
  artifactCollection(name: String!): ArtifactCollection
  artifact(name: String!): Artifact
}

interface ArtifactCollection {
  id: ID!
  name: String!
  project: Project
  defaultArtifactType: ArtifactType
  artifacts(after: String, first: Int, order: String, filters: JSONString): VersionedArtifactConnection!
  artifactMembership(aliasName: String!): ArtifactCollectionMembership
}

type ArtifactSequence implements ArtifactCollection {
  id: ID!
  name: String!
  project: Project
  defaultArtifactType: ArtifactType
  artifacts(after: String, first: Int, order: String, filters: JSONString): VersionedArtifactConnection!
  artifactMembership(aliasName: String!): ArtifactCollectionMembership
  latestArtifact: Artifact
}

type VersionedArtifactConnection {
  totalCount: Int!
  pageInfo: PageInfo!
  edges: [VersionedArtifactEdge!]!
}
type VersionedArtifactEdge { version: String! cursor: String node: Artifact }

type PageInfo {
  startCursor: String
  endCursor: String
  hasNextPage: Boolean!
  hasPreviousPage: Boolean
}

type ArtifactCollectionMembership {
  id: ID!
  versionIndex: Int
  createdAt: DateTime
  aliases: [ArtifactAlias!]!
  artifactCollection: ArtifactCollection
  artifact: Artifact
  files(after: String, first: Int): FileConnection!
}

enum ArtifactState { PENDING COMMITTED DELETED }

type Artifact {
  id: ID!
  artifactSequence: ArtifactSequence!
  versionIndex: Int
  artifactType: ArtifactType!
  description: String
  metadata: JSONString
  ttlDurationSeconds: Int64!
  ttlIsInherited: Boolean!
  tags: [Tag!]!
  historyStep: Int64
  state: ArtifactState!
  size: Int64!
  digest: String!
  commitHash: String
  fileCount: Int64!
  createdAt: DateTime!
  updatedAt: DateTime
  aliases: [ArtifactAlias!]!
  currentManifest: ArtifactManifest
  files(after: String, first: Int): FileConnection!
}

type Tag { id: ID! name: String! }
type ArtifactAlias { id: ID! alias: String! artifactCollection: ArtifactCollection }
type ArtifactManifest { id: ID! file: File! }

type File {
  id: ID!
  name: String!
  directUrl: String!
  url: String
  md5: String
  sizeBytes: Int64
  uploadUrl: String
  uploadHeaders: [String!]
  storagePath: String
  uploadMultipartUrls: UploadMultipartUrls
  artifact: Artifact
}
type UploadMultipartUrls { uploadID: String! uploadUrlParts: [UploadUrlPart!]! }
type UploadUrlPart { partNumber: Int64! uploadUrl: String! }
type FileConnection { pageInfo: PageInfo! edges: [FileEdge!]! }
type FileEdge { cursor: String node: File }

input ArtifactAliasInput { alias: String! artifactCollectionName: String! }
input TagInput { tagName: String! tagCategoryName: String attributes: JSONString }
enum ArtifactDigestAlgorithm { MANIFEST_MD5 }

input CreateArtifactInput {
  artifactTypeName: String!
  artifactCollectionName: String!
  artifactCollectionNames: [String!]
  entityName: String!
  projectName: String!
  runName: String
  description: String
  digest: String!
  digestAlgorithm: ArtifactDigestAlgorithm
  labels: JSONString
  aliases: [ArtifactAliasInput!]
  tags: [TagInput!]
  metadata: JSONString
  ttlDurationSeconds: Int64
  historyStep: Int64
  enableDigestDeduplication: Boolean
  distributedID: String
  clientID: ID
  sequenceClientID: ID
  storageRegion: String
  clientMutationId: String
}
type CreateArtifactPayload { artifact: Artifact! }

enum ArtifactManifestType { FULL PATCH INCREMENTAL }
input CreateArtifactManifestInput {
  artifactID: ID!
  baseArtifactID: ID
  name: String!
  digest: String!
  entityName: String!
  projectName: String!
  runName: String!
  type: ArtifactManifestType
  includeUpload: Boolean
  clientMutationId: String
}
type CreateArtifactManifestPayload { artifactManifest: ArtifactManifest! }

enum ArtifactStorageLayout { V1 V2 }
input UploadPartsInput { partNumber: Int64! hexMD5: String! }
input CreateArtifactFileSpecInput {
  artifactID: ID!
  artifactManifestID: ID
  name: String!
  md5: String!
  mimetype: String
  uploadPartsInput: [UploadPartsInput!]
}
input CreateArtifactFilesInput {
  artifactFiles: [CreateArtifactFileSpecInput!]!
  storageLayout: ArtifactStorageLayout
  cloudRegionID: String
  clientMutationId: String
}
type CreateArtifactFilesPayload { files: FileConnection! }

input CommitArtifactInput { artifactID: ID! clientMutationId: String }
type CommitArtifactPayload { artifact: Artifact! }

input UpdateArtifactInput {
  artifactID: ID!
  description: String
  metadata: JSONString
  ttlDurationSeconds: Int64
  aliases: [ArtifactAliasInput!]
  tagsToAdd: [TagInput!]
  tagsToDelete: [TagInput!]
  clientMutationId: String
}
type UpdateArtifactPayload { artifact: Artifact! }

input ArtifactCollectionAliasInput { alias: String! artifactCollectionName: String! entityName: String! projectName: String! }
input AddAliasesInput { artifactID: ID! aliases: [ArtifactCollectionAliasInput!]! clientMutationId: String }
input DeleteAliasesInput { artifactID: ID! aliases: [ArtifactCollectionAliasInput!]! clientMutationId: String }
type AddAliasesPayload { success: Boolean! clientMutationId: String }
type DeleteAliasesPayload { success: Boolean! clientMutationId: String }
`;

export const schema = buildSchema(SDL);
