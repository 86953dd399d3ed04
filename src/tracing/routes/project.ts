import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { depsOf, projectFor } from '../http/access.js';
import { tags } from '../schemas/common.js';
import { ProjectStatsBody, ProjectStatsResponse } from '../schemas/project.js';
import { projectStats } from '../services/project.js';

export const projectRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);
  app.post(
    '/project/stats',
    {
      schema: {
        tags,
        summary: 'Storage sizes of a project',
        description: 'Bytes stored for live calls (their JSON payloads), live objects, table rows and files; each part can be left out (0).',
        body: ProjectStatsBody,
        response: { 200: ProjectStatsResponse },
      },
    },
    async (request) => projectStats(deps, projectFor(request, request.body.project_id), request.body),
  );
};
