import type { Executor } from './common.js';

/** trace_files: content-addressed file bytes per project. */

export async function insertFile(db: Executor, args: { projectId: string; digest: string; name: string; content: Buffer }): Promise<void> {
  await db
    .insertInto('trace_files')
    .values({ project_id: args.projectId, digest: args.digest, name: args.name, content: args.content, size_bytes: args.content.length })
    .onConflict((oc) => oc.columns(['project_id', 'digest']).doNothing())
    .execute();
}

export async function readFileContent(db: Executor, args: { projectId: string; digest: string }): Promise<Buffer | undefined> {
  const row = await db
    .selectFrom('trace_files')
    .select('content')
    .where('project_id', '=', args.projectId)
    .where('digest', '=', args.digest)
    .executeTakeFirst();
  return row ? Buffer.from(row.content) : undefined;
}
