import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';

/** The inference API's routes and background work; registered by src/app.ts. */
export const inferencePlugin: FastifyPluginAsyncZod = async () => {};
