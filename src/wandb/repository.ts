import { sql, type Kysely, type Selectable, type Transaction } from 'kysely';
import type { Database } from '../db/schema.js';
import type { WandbArtifactTable, WandbCollectionTable, WandbRunTable } from './tables.js';

/** Queries of the W&B tables. Every lookup is scoped by entity; callers check that the key reaches it. */
export type Executor = Kysely<Database> | Transaction<Database>;

export type RunRow = Selectable<WandbRunTable>;
export type CollectionRow = Selectable<WandbCollectionTable>;
export type ArtifactRow = Selectable<WandbArtifactTable>;
export interface ArtifactWithCollection {
  artifact: ArtifactRow;
  collection: CollectionRow;
}

/** Rows of one multi-row statement, well under the 65,535 parameters a statement may carry. */
const ROWS_PER_STATEMENT = 1000;

export interface ProjectScope {
  entity: string;
  project: string;
}

// ---------------------------------------------------------------------------------------------------
// Runs

export async function findRun(db: Executor, args: ProjectScope & { name: string }): Promise<RunRow | undefined> {
  return db.selectFrom('wandb_runs').selectAll().where('entity', '=', args.entity).where('project', '=', args.project).where('name', '=', args.name).executeTakeFirst();
}

/** A project's runs by name (one name, or all), at most `limit`. */
export async function listRuns(db: Executor, args: ProjectScope & { name?: string; limit: number }): Promise<RunRow[]> {
  let query = db.selectFrom('wandb_runs').selectAll().where('entity', '=', args.entity).where('project', '=', args.project);
  if (args.name !== undefined) query = query.where('name', '=', args.name);
  return query.orderBy('name').limit(args.limit).execute();
}

export async function findRunById(db: Executor, args: { entities: ReadonlySet<string>; id: number }): Promise<RunRow | undefined> {
  const row = await db.selectFrom('wandb_runs').selectAll().where('id', '=', args.id).executeTakeFirst();
  return row && args.entities.has(row.entity) ? row : undefined;
}

export async function insertRun(
  db: Executor,
  args: ProjectScope & { name: string; displayName: string | null; jobType: string | null; config: string | null; tags?: string[]; notes?: string; group?: string },
): Promise<{ row: RunRow; inserted: boolean }> {
  const inserted = await db
    .insertInto('wandb_runs')
    .values({
      entity: args.entity,
      project: args.project,
      name: args.name,
      display_name: args.displayName,
      job_type: args.jobType,
      config: args.config,
      summary: null,
      tags: args.tags ?? [],
      notes: args.notes ?? null,
      group_name: args.group ?? null,
      exitcode: null,
      completed_at: null,
    })
    .onConflict((c) => c.constraint('wandb_runs_name_uq').doNothing())
    .returningAll()
    .executeTakeFirst();
  if (inserted) return { row: inserted, inserted: true };
  return { row: (await findRun(db, args))!, inserted: false };
}

export async function updateRun(
  db: Executor,
  args: { id: number; displayName?: string; jobType?: string; config?: string; summary?: string; tags?: string[]; notes?: string; group?: string; reopen?: boolean },
): Promise<RunRow> {
  return db
    .updateTable('wandb_runs')
    .set({
      ...(args.displayName !== undefined ? { display_name: args.displayName } : {}),
      ...(args.tags !== undefined ? { tags: args.tags } : {}),
      ...(args.notes !== undefined ? { notes: args.notes } : {}),
      ...(args.group !== undefined ? { group_name: args.group } : {}),
      ...(args.jobType !== undefined ? { job_type: args.jobType } : {}),
      ...(args.config !== undefined ? { config: args.config } : {}),
      ...(args.summary !== undefined ? { summary: args.summary } : {}),
      ...(args.reopen ? { completed_at: null, exitcode: null } : {}),
      updated_at: new Date(),
    })
    .where('id', '=', args.id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Writes history lines at their offsets (the SDK retries, and two live runs may share an id). */
export async function putHistoryLines(db: Executor, args: { runId: number; offset: number; lines: string[] }): Promise<void> {
  if (args.lines.length === 0) return;
  await db
    .insertInto('wandb_run_history')
    .values(args.lines.map((content, i) => ({ run_id: args.runId, line: args.offset + i, content })))
    .onConflict((c) => c.columns(['run_id', 'line']).doUpdateSet({ content: sql`excluded.content` }))
    .execute();
  await db
    .updateTable('wandb_runs')
    .set({ history_line_count: sql`greatest(history_line_count, ${args.offset + args.lines.length})`, updated_at: new Date() })
    .where('id', '=', args.runId)
    .execute();
}

export async function finishRun(db: Executor, args: { runId: number; exitcode: number | null }): Promise<void> {
  await db.updateTable('wandb_runs').set({ exitcode: args.exitcode, completed_at: new Date(), updated_at: new Date() }).where('id', '=', args.runId).execute();
}

export async function historyLines(db: Executor, args: { runId: number; fromLine?: number; last?: number }): Promise<{ line: number; content: string }[]> {
  if (args.last !== undefined) {
    const rows = await db.selectFrom('wandb_run_history').select(['line', 'content']).where('run_id', '=', args.runId).orderBy('line', 'desc').limit(args.last).execute();
    return rows.reverse();
  }
  return db.selectFrom('wandb_run_history').select(['line', 'content']).where('run_id', '=', args.runId).where('line', '>=', args.fromLine ?? 0).orderBy('line').execute();
}

/**
 * History rows by `_step`, oldest first. A step written twice (two live runs sharing an id, or a resume
 * that restarted) reads as its last line.
 */
export async function historyRows(db: Executor, args: { runId: number; afterStep: number; limit: number }): Promise<{ step: number; content: string }[]> {
  const { rows } = await sql<{ step: number; content: string }>`
    select distinct on (step) step, content from (
      select (content::jsonb ->> '_step')::bigint as step, line, content from wandb_run_history where run_id = ${args.runId}
    ) h
    where step > ${args.afterStep}
    order by step, line desc
    limit ${args.limit}`.execute(db);
  return rows.map((r) => ({ step: Number(r.step), content: r.content }));
}

/** How long a run file's upload URL takes bytes after createRunFiles last handed it out. */
export const RUN_FILE_URL_HOURS = 24;

export async function putRunFileTokens(db: Executor, args: { runId: number; files: { name: string; token: string }[] }): Promise<{ name: string; token: string }[]> {
  // A file asked for again keeps its token, so a retried upload URL still works, for a day from now.
  const expiresAt = sql<Date>`now() + ${`${RUN_FILE_URL_HOURS} hours`}::interval`;
  const out: { name: string; token: string }[] = [];
  for (let i = 0; i < args.files.length; i += ROWS_PER_STATEMENT) {
    const files = args.files.slice(i, i + ROWS_PER_STATEMENT);
    await db
      .insertInto('wandb_run_files')
      .values(files.map((f) => ({ run_id: args.runId, name: f.name, upload_token: f.token, md5: null, upload_expires_at: expiresAt })))
      .onConflict((c) => c.columns(['run_id', 'name']).doUpdateSet({ upload_expires_at: expiresAt }))
      .execute();
    out.push(
      ...(await db
        .selectFrom('wandb_run_files')
        .select(['name', 'upload_token as token'])
        .where('run_id', '=', args.runId)
        .where(
          'name',
          'in',
          files.map((f) => f.name),
        )
        .execute()),
    );
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Blobs

export async function blobExists(db: Executor, args: { entity: string; md5: string }): Promise<{ size: number } | undefined> {
  return db.selectFrom('wandb_blobs').select('size').where('entity', '=', args.entity).where('md5', '=', args.md5).executeTakeFirst();
}

/** Which of these blobs (hex md5s) the entity holds. */
export async function existingBlobs(db: Executor, args: { entity: string; md5s: string[] }): Promise<Set<string>> {
  const held = new Set<string>();
  for (let i = 0; i < args.md5s.length; i += ROWS_PER_STATEMENT) {
    const rows = await db.selectFrom('wandb_blobs').select('md5').where('entity', '=', args.entity).where('md5', 'in', args.md5s.slice(i, i + ROWS_PER_STATEMENT)).execute();
    for (const row of rows) held.add(row.md5);
  }
  return held;
}

export async function putBlob(db: Executor, args: { entity: string; md5: string; data: Buffer }): Promise<void> {
  await db
    .insertInto('wandb_blobs')
    .values({ entity: args.entity, md5: args.md5, size: args.data.length, data: args.data })
    .onConflict((c) => c.columns(['entity', 'md5']).doNothing())
    .execute();
}

export async function readBlob(db: Executor, args: { entity: string; md5: string }): Promise<Buffer | undefined> {
  const row = await db.selectFrom('wandb_blobs').select('data').where('entity', '=', args.entity).where('md5', '=', args.md5).executeTakeFirst();
  return row ? Buffer.from(row.data) : undefined;
}

// ---------------------------------------------------------------------------------------------------
// Collections, artifacts, aliases, files

export async function findCollection(db: Executor, args: ProjectScope & { name: string }): Promise<CollectionRow | undefined> {
  return db.selectFrom('wandb_collections').selectAll().where('entity', '=', args.entity).where('project', '=', args.project).where('name', '=', args.name).executeTakeFirst();
}

export async function ensureCollection(db: Executor, args: ProjectScope & { name: string; type: string }): Promise<CollectionRow> {
  await db
    .insertInto('wandb_collections')
    .values({ entity: args.entity, project: args.project, name: args.name, type: args.type })
    .onConflict((c) => c.constraint('wandb_collections_name_uq').doNothing())
    .execute();
  return (await findCollection(db, args))!;
}

export async function findArtifact(db: Executor, args: { id: number }): Promise<ArtifactWithCollection | undefined> {
  const artifact = await db.selectFrom('wandb_artifacts').selectAll().where('id', '=', args.id).executeTakeFirst();
  if (!artifact) return undefined;
  const collection = await db.selectFrom('wandb_collections').selectAll().where('id', '=', artifact.collection_id).executeTakeFirstOrThrow();
  return { artifact, collection };
}

export async function findArtifactByManifestToken(db: Executor, args: { token: string }): Promise<ArtifactWithCollection | undefined> {
  const row = await db.selectFrom('wandb_artifacts').select('id').where('manifest_token', '=', args.token).executeTakeFirst();
  return row ? findArtifact(db, { id: row.id }) : undefined;
}

export async function findCommittedByDigest(db: Executor, args: { collectionId: number; digest: string }): Promise<ArtifactRow | undefined> {
  return db
    .selectFrom('wandb_artifacts')
    .selectAll()
    .where('collection_id', '=', args.collectionId)
    .where('digest', '=', args.digest)
    .where('state', '=', 'COMMITTED')
    .orderBy('version_index', 'desc')
    .executeTakeFirst();
}

/** The committed version `vN` of a collection, or the one an alias points at. */
export async function findVersion(db: Executor, args: { collectionId: number; versionIndex?: number; alias?: string }): Promise<ArtifactRow | undefined> {
  if (args.versionIndex !== undefined) {
    return db.selectFrom('wandb_artifacts').selectAll().where('collection_id', '=', args.collectionId).where('version_index', '=', args.versionIndex).where('state', '=', 'COMMITTED').executeTakeFirst();
  }
  return db
    .selectFrom('wandb_aliases')
    .innerJoin('wandb_artifacts', 'wandb_artifacts.id', 'wandb_aliases.artifact_id')
    .selectAll('wandb_artifacts')
    .where('wandb_aliases.collection_id', '=', args.collectionId)
    .where('wandb_aliases.alias', '=', args.alias!)
    .where('wandb_artifacts.state', '=', 'COMMITTED')
    .executeTakeFirst();
}

export async function latestCommitted(db: Executor, args: { collectionId: number }): Promise<ArtifactRow | undefined> {
  return db.selectFrom('wandb_artifacts').selectAll().where('collection_id', '=', args.collectionId).where('state', '=', 'COMMITTED').orderBy('version_index', 'desc').executeTakeFirst();
}

export async function listCommitted(db: Executor, args: { collectionId: number; offset: number; limit: number }): Promise<{ rows: ArtifactRow[]; total: number }> {
  const rows = await db
    .selectFrom('wandb_artifacts')
    .selectAll()
    .where('collection_id', '=', args.collectionId)
    .where('state', '=', 'COMMITTED')
    .orderBy('version_index', 'desc')
    .offset(args.offset)
    .limit(args.limit)
    .execute();
  const { total } = await db
    .selectFrom('wandb_artifacts')
    .select((eb) => eb.fn.countAll<number>().as('total'))
    .where('collection_id', '=', args.collectionId)
    .where('state', '=', 'COMMITTED')
    .executeTakeFirstOrThrow();
  return { rows, total: Number(total) };
}

export async function insertArtifact(
  db: Executor,
  args: {
    collectionId: number;
    digest: string;
    description: string | null;
    metadata: string | null;
    runName: string | null;
    storageRegion: string | null;
    aliases: string[];
    tags: string[];
    manifestToken: string;
  },
): Promise<ArtifactRow> {
  return db
    .insertInto('wandb_artifacts')
    .values({
      collection_id: args.collectionId,
      version_index: null,
      state: 'PENDING',
      digest: args.digest,
      description: args.description,
      metadata: args.metadata,
      run_name: args.runName,
      storage_region: args.storageRegion,
      pending_aliases: args.aliases,
      tags: args.tags,
      manifest_token: args.manifestToken,
      manifest_md5: null,
      manifest_expected_md5: null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function setManifestExpected(db: Executor, args: { artifactId: number; md5: string }): Promise<void> {
  await db.updateTable('wandb_artifacts').set({ manifest_expected_md5: args.md5, updated_at: new Date() }).where('id', '=', args.artifactId).execute();
}

/**
 * Locks a PENDING artifact's row until the transaction ends (a commit waits for it, and it for a commit);
 * undefined when the artifact is no longer PENDING. Answers the MD5 of its uploaded manifest (null: none).
 */
export async function lockPendingArtifact(db: Executor, args: { artifactId: number }): Promise<{ manifestMd5: string | null } | undefined> {
  const row = await db.selectFrom('wandb_artifacts').select('manifest_md5').where('id', '=', args.artifactId).where('state', '=', 'PENDING').forUpdate().executeTakeFirst();
  return row && { manifestMd5: row.manifest_md5 };
}

export async function setManifestUploaded(db: Executor, args: { artifactId: number; md5: string }): Promise<void> {
  await db.updateTable('wandb_artifacts').set({ manifest_md5: args.md5, updated_at: new Date() }).where('id', '=', args.artifactId).execute();
}

export async function updateArtifactFields(db: Executor, args: { artifactId: number; description?: string | null; metadata?: string | null }): Promise<void> {
  await db
    .updateTable('wandb_artifacts')
    .set({
      ...(args.description !== undefined ? { description: args.description } : {}),
      ...(args.metadata !== undefined ? { metadata: args.metadata } : {}),
      updated_at: new Date(),
    })
    .where('id', '=', args.artifactId)
    .execute();
}

/** Makes a PENDING artifact the collection's next version; false when a concurrent commit already did. */
export async function markCommitted(db: Executor, args: { artifactId: number; collectionId: number; size: number; fileCount: number }): Promise<boolean> {
  // Serialises commits within a collection, so version indexes are dense and never taken twice.
  await db.selectFrom('wandb_collections').select('id').where('id', '=', args.collectionId).forUpdate().execute();
  const current = await db.selectFrom('wandb_artifacts').select('state').where('id', '=', args.artifactId).executeTakeFirstOrThrow();
  if (current.state !== 'PENDING') return false;
  const { next } = await db
    .selectFrom('wandb_artifacts')
    .select(sql<number>`coalesce(max(version_index) + 1, 0)`.as('next'))
    .where('collection_id', '=', args.collectionId)
    .executeTakeFirstOrThrow();
  await db
    .updateTable('wandb_artifacts')
    .set({ state: 'COMMITTED', version_index: Number(next), size: args.size, file_count: args.fileCount, pending_aliases: [], updated_at: new Date() })
    .where('id', '=', args.artifactId)
    .execute();
  return true;
}

/** Points each alias at the artifact, moving it from whichever version of the collection held it. */
export async function setAliases(db: Executor, args: { collectionId: number; artifactId: number; aliases: string[] }): Promise<void> {
  if (args.aliases.length === 0) return;
  await db
    .insertInto('wandb_aliases')
    .values(args.aliases.map((alias) => ({ collection_id: args.collectionId, alias, artifact_id: args.artifactId })))
    .onConflict((c) => c.columns(['collection_id', 'alias']).doUpdateSet({ artifact_id: sql`excluded.artifact_id` }))
    .execute();
}

/** Removes these aliases from the artifact; an alias another version holds stays there. */
export async function deleteAliases(db: Executor, args: { collectionId: number; artifactId: number; aliases: string[] }): Promise<void> {
  if (args.aliases.length === 0) return;
  await db.deleteFrom('wandb_aliases').where('collection_id', '=', args.collectionId).where('artifact_id', '=', args.artifactId).where('alias', 'in', args.aliases).execute();
}

/** Adds `add` to an artifact version's tags and takes `remove` off, on its locked row: concurrent edits each keep the other's. Returns the tags. */
export async function changeArtifactTags(db: Executor, args: { artifactId: number; add: string[]; remove: ReadonlySet<string> }): Promise<string[]> {
  const row = await db.selectFrom('wandb_artifacts').select('tags').where('id', '=', args.artifactId).forUpdate().executeTakeFirstOrThrow();
  const tags = [...new Set([...row.tags, ...args.add])].filter((tag) => !args.remove.has(tag));
  if (tags.length !== row.tags.length || tags.some((tag, i) => tag !== row.tags[i])) await setArtifactTags(db, { artifactId: args.artifactId, tags });
  return tags;
}

export async function setArtifactTags(db: Executor, args: { artifactId: number; tags: string[] }): Promise<void> {
  await db.updateTable('wandb_artifacts').set({ tags: args.tags, updated_at: new Date() }).where('id', '=', args.artifactId).execute();
}

export async function aliasesOf(db: Executor, args: { artifactIds: number[] }): Promise<{ artifact_id: number; alias: string }[]> {
  if (args.artifactIds.length === 0) return [];
  return db.selectFrom('wandb_aliases').select(['artifact_id', 'alias']).where('artifact_id', 'in', args.artifactIds).orderBy('alias').execute();
}

/** Adds files, or gives existing ones (by name) a new md5, keeping their tokens. Names must be distinct. */
export async function putArtifactFiles(db: Executor, args: { artifactId: number; files: { name: string; md5: string; token: string }[] }): Promise<void> {
  for (let i = 0; i < args.files.length; i += ROWS_PER_STATEMENT) {
    await db
      .insertInto('wandb_artifact_files')
      .values(args.files.slice(i, i + ROWS_PER_STATEMENT).map((f) => ({ artifact_id: args.artifactId, name: f.name, md5: f.md5, size: null, birth_artifact_id: args.artifactId, token: f.token })))
      .onConflict((c) => c.columns(['artifact_id', 'name']).doUpdateSet({ md5: sql`excluded.md5` }))
      .execute();
  }
}

/** The upload tokens of these files of the artifact, by name. */
export async function artifactFileTokens(db: Executor, args: { artifactId: number; names: string[] }): Promise<Map<string, string>> {
  const tokens = new Map<string, string>();
  for (let i = 0; i < args.names.length; i += ROWS_PER_STATEMENT) {
    const rows = await db
      .selectFrom('wandb_artifact_files')
      .select(['name', 'token'])
      .where('artifact_id', '=', args.artifactId)
      .where('name', 'in', args.names.slice(i, i + ROWS_PER_STATEMENT))
      .execute();
    for (const row of rows) tokens.set(row.name, row.token);
  }
  return tokens;
}

export async function artifactFiles(db: Executor, args: { artifactId: number }): Promise<{ name: string; md5: string; size: number | null; token: string; birth_artifact_id: number }[]> {
  return db.selectFrom('wandb_artifact_files').select(['name', 'md5', 'size', 'token', 'birth_artifact_id']).where('artifact_id', '=', args.artifactId).orderBy('name').execute();
}

export async function setFileSizes(db: Executor, args: { artifactId: number; files: { name: string; size: number }[] }): Promise<void> {
  for (const file of args.files) {
    await db.updateTable('wandb_artifact_files').set({ size: file.size }).where('artifact_id', '=', args.artifactId).where('name', '=', file.name).execute();
  }
}

export async function deleteFilesNotIn(db: Executor, args: { artifactId: number; names: string[] }): Promise<void> {
  let query = db.deleteFrom('wandb_artifact_files').where('artifact_id', '=', args.artifactId);
  if (args.names.length) query = query.where('name', 'not in', args.names);
  await query.execute();
}

/** An artifact file by the token of its URLs, with the entity that owns its bytes. */
export async function findFileByToken(
  db: Executor,
  args: { token: string },
): Promise<{ artifact_id: number; name: string; md5: string; entity: string; state: string } | undefined> {
  return db
    .selectFrom('wandb_artifact_files')
    .innerJoin('wandb_artifacts', 'wandb_artifacts.id', 'wandb_artifact_files.artifact_id')
    .innerJoin('wandb_collections', 'wandb_collections.id', 'wandb_artifacts.collection_id')
    .select(['wandb_artifact_files.artifact_id', 'wandb_artifact_files.name', 'wandb_artifact_files.md5', 'wandb_collections.entity', 'wandb_artifacts.state'])
    .where('wandb_artifact_files.token', '=', args.token)
    .executeTakeFirst();
}

/** The run file an upload URL names, while the URL lasts (`live`: it has not expired). */
export async function findRunFileByToken(db: Executor, args: { token: string }): Promise<{ run_id: number; name: string; entity: string; live: boolean } | undefined> {
  return db
    .selectFrom('wandb_run_files')
    .innerJoin('wandb_runs', 'wandb_runs.id', 'wandb_run_files.run_id')
    .select(['wandb_run_files.run_id', 'wandb_run_files.name', 'wandb_runs.entity', sql<boolean>`wandb_run_files.upload_expires_at > now()`.as('live')])
    .where('wandb_run_files.upload_token', '=', args.token)
    .executeTakeFirst();
}

/** Locks a run file's row until the transaction ends; answers the MD5 of its content (null: none yet). */
export async function lockRunFile(db: Executor, args: { runId: number; name: string }): Promise<string | null> {
  const row = await db.selectFrom('wandb_run_files').select('md5').where('run_id', '=', args.runId).where('name', '=', args.name).forUpdate().executeTakeFirst();
  return row?.md5 ?? null;
}

export async function setRunFileMd5(db: Executor, args: { runId: number; name: string; md5: string }): Promise<void> {
  await db.updateTable('wandb_run_files').set({ md5: args.md5 }).where('run_id', '=', args.runId).where('name', '=', args.name).execute();
}
