import { z } from 'zod';
import { ProjectId } from './common.js';

/** Project statistics (weave's /project/stats, for the UI's storage page). */

export const ProjectStatsBody = z.object({
  project_id: ProjectId,
  include_trace_storage_size: z.boolean().nullish().describe('Default true; false answers 0.'),
  include_object_storage_size: z.boolean().nullish().describe('Default true; false answers 0.'),
  include_table_storage_size: z.boolean().nullish().describe('Default true; false answers 0.'),
  include_file_storage_size: z.boolean().nullish().describe('Default true; false answers 0.'),
});
export type ProjectStatsBody = z.infer<typeof ProjectStatsBody>;

export const ProjectStatsResponse = z.object({
  trace_storage_size_bytes: z.number(),
  objects_storage_size_bytes: z.number(),
  tables_storage_size_bytes: z.number(),
  files_storage_size_bytes: z.number(),
});
