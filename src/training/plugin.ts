import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';

/** The training API's routes and background work; registered by src/app.ts. */
export const trainingPlugin: FastifyPluginAsyncZod = async () => {};
