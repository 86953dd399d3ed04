import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';

/** The tracing API's routes and background work; registered by src/app.ts. */
export const tracingPlugin: FastifyPluginAsyncZod = async () => {};
