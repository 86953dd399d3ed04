import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { allPassed } from './checks.js';

export const HealthResponse = z.object({ status: z.literal('ok') });

export const CheckResult = z
  .object({
    success: z.boolean(),
    duration_ms: z.number(),
    error: z.string().optional(),
  })
  .loose()
  .describe('One component: whether its check passed, how long it took, and why it failed.');

export const SystemCheckResponse = z
  .object({ api: CheckResult, database: CheckResult, cpu_queue: CheckResult, gpu_queue: CheckResult })
  .loose();

export const healthRoutes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/v1/health',
    {
      config: { auth: 'none' },
      schema: { tags: ['health'], summary: 'Health Check', security: [], response: { 200: HealthResponse } },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/v1/system-check',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['health'],
        summary: 'System Check',
        description:
          'Checks the API, the database, the job queue (cpu_queue) and trainer workers (gpu_queue). 503 when any check fails.',
        security: [],
        response: { 200: SystemCheckResponse, 503: SystemCheckResponse },
      },
    },
    async (_request, reply) => {
      const results = await app.systemChecks.run();
      const healthy = allPassed(results);
      return reply.status(healthy ? 200 : 503).send(results as z.infer<typeof SystemCheckResponse>);
    },
  );
};
