import type { FastifyInstance, FastifyRequest } from 'fastify';
import { principalOf } from '../../auth/plugin.js';
import { requireProject } from '../../auth/principal.js';
import type { TracingDeps } from '../services/deps.js';

/**
 * The project a request names, once the key is known to reach it: 403 otherwise, before anything is
 * read or written, so that a refused request never touches another tenant's data.
 */
export function projectFor(request: FastifyRequest, projectId: string, param = 'project_id'): string {
  requireProject(principalOf(request), projectId, param);
  return projectId;
}

export function depsOf(app: FastifyInstance): TracingDeps {
  return { db: app.db, kind: app.database.kind };
}
