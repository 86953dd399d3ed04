import type { FastifyInstance, FastifyRequest } from 'fastify';
import { principalOf } from '../../auth/plugin.js';
import { requireProject } from '../../auth/principal.js';
import { CallPageEnds } from '../services/call-pages.js';
import type { TracingDeps } from '../services/deps.js';

/**
 * The project a request names, once the key is known to reach it: 403 otherwise, before anything is
 * read or written, so that a refused request never touches another tenant's data.
 */
export function projectFor(request: FastifyRequest, projectId: string, param = 'project_id'): string {
  requireProject(principalOf(request), projectId, param);
  return projectId;
}

/** Each app's page ends, kept beside its database. */
const callPages = new WeakMap<object, CallPageEnds>();

export function depsOf(app: FastifyInstance): TracingDeps {
  let pages = callPages.get(app.db);
  if (!pages) callPages.set(app.db, (pages = new CallPageEnds()));
  return { db: app.db, kind: app.database.kind, callPages: pages };
}
