import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { tags } from '../schemas/common.js';

/** GET /health and /server_info (reference §2.1): no key needed, as on the reference server. */

export const TRACE_SERVER_VERSION = '1.0.0';

export const serviceRoutes: FastifyPluginAsyncZod = async (app) => {
  const config = { auth: 'none' as const };
  app.get(
    '/health',
    { config, schema: { tags, summary: 'Tracing health check', security: [], response: { 200: z.object({ status: z.literal('ok') }) } } },
    async () => ({ status: 'ok' as const }),
  );
  app.get(
    '/server_info',
    {
      config,
      schema: {
        tags,
        summary: 'Trace server info',
        security: [],
        response: { 200: z.object({ min_required_weave_python_version: z.string(), trace_server_version: z.string() }) },
      },
    },
    async () => ({ min_required_weave_python_version: '0.0.0', trace_server_version: TRACE_SERVER_VERSION }),
  );
};
