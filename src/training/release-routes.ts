import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../auth/plugin.js';
import { AcknowledgeReleases, CheckpointReleaseList, ReleaseListQuery, ReleasesAcknowledged } from './lifecycle-schemas.js';
import type { LifecycleService } from './lifecycle-service.js';

/**
 * Storage of deleted trained checkpoints, handed to the workers' side (docs/training.md, "What a delete
 * releases"): trainyard does not own where workers write adapters, so it lists what may be deleted and
 * forgets each entry once the worker side says it is done. Worker keys only, scoped like jobs.
 */
export const releaseRoutes: FastifyPluginAsyncZod<{ lifecycle: LifecycleService }> = async (app, { lifecycle }) => {
  const tags = ['workers'];
  const config = { auth: 'worker' as const };

  app.get(
    '/v1/workers/checkpoint-releases',
    {
      config,
      schema: {
        tags,
        summary: 'List checkpoint storage to release',
        description:
          'URIs of deleted checkpoints (by a user, the retention policy, the TTL or a model delete) of the entities this key reaches, oldest first (by id; `after` pages on). Delete what each names, then acknowledge it.',
        querystring: ReleaseListQuery,
        response: { 200: CheckpointReleaseList },
      },
    },
    async (request) => lifecycle.listReleases(principalOf(request), request.query),
  );

  app.post(
    '/v1/workers/checkpoint-releases/ack',
    {
      config,
      schema: {
        tags,
        summary: 'Acknowledge released checkpoint storage',
        description: 'Forgets the listed releases. Ids of entities the key does not reach, or already acknowledged, are not counted.',
        body: AcknowledgeReleases,
        response: { 200: ReleasesAcknowledged },
      },
    },
    async (request) => lifecycle.acknowledgeReleases(principalOf(request), request.body.ids),
  );
};
