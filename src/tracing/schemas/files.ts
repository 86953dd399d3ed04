import { z } from 'zod';
import { Key, ProjectId } from './common.js';

/** Files (reference §2.5). /file/create is multipart: fields `project_id` and `file` (and `expected_digest`). */

export const FileCreateResponse = z.object({ digest: z.string() });
export const FileContentBody = z.object({ project_id: ProjectId, digest: Key });
