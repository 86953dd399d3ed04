import { storageSizes, type StorageKind } from '../repositories/project.js';
import type { ProjectStatsBody } from '../schemas/project.js';
import type { TracingDeps } from './deps.js';

/** weave's /project/stats: storage sizes in bytes; a part left out answers 0. */
export async function projectStats(deps: TracingDeps, projectId: string, body: ProjectStatsBody) {
  const wanted: [StorageKind, boolean | null | undefined][] = [
    ['trace', body.include_trace_storage_size],
    ['objects', body.include_object_storage_size],
    ['tables', body.include_table_storage_size],
    ['files', body.include_file_storage_size],
  ];
  const sizes = await storageSizes(deps.db, { projectId, kinds: new Set(wanted.filter(([, on]) => on !== false).map(([kind]) => kind)) });
  return {
    trace_storage_size_bytes: sizes.trace,
    objects_storage_size_bytes: sizes.objects,
    tables_storage_size_bytes: sizes.tables,
    files_storage_size_bytes: sizes.files,
  };
}
