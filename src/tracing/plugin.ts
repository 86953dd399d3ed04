import multipart from '@fastify/multipart';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { sendError } from '../http/error-handler.js';
import { unmarkNumbers } from '../http/exact-numbers.js';
import { registerTracingBodyParsers } from './http/body.js';
import { tracingValueError } from './repositories/common.js';
import { callRoutes } from './routes/calls.js';
import { completionRoutes } from './routes/completions.js';
import { costRoutes } from './routes/costs.js';
import { feedbackRoutes } from './routes/feedback.js';
import { fileRoutes } from './routes/files.js';
import { objectLabelRoutes } from './routes/object-labels.js';
import { objectRoutes } from './routes/objects.js';
import { otelRoutes } from './routes/otel.js';
import { projectRoutes } from './routes/project.js';
import { refRoutes } from './routes/refs.js';
import { serviceRoutes } from './routes/service.js';
import { tableRoutes } from './routes/tables.js';
import { threadRoutes } from './routes/threads.js';
import { v2Routes } from './routes/v2.js';

/** The tracing API (weave trace-server protocol), mounted by src/app.ts under /traces. */
export const tracingPlugin: FastifyPluginAsyncZod = async (app) => {
  registerTracingBodyParsers(app);
  // Values the database refuses are the tracing API's 400 {"reason"} (clients retry 5xx, and the
  // reference prefers 400 to the app-wide 422 backstop); everything else goes to the app's handler.
  app.setErrorHandler((error, request, reply) => sendError(request, reply, tracingValueError(error) ?? error));
  // Exact numbers read from call payloads are serialised as marked strings (exact-numbers.ts):
  // every JSON text answered here writes them as their literals.
  app.addHook('onSend', (_request, _reply, payload, done) => {
    done(null, typeof payload === 'string' ? unmarkNumbers(payload) : payload);
  });
  await app.register(multipart, { limits: { fileSize: app.config.traceFileLimitBytes, files: 1 } });
  await app.register(serviceRoutes);
  await app.register(callRoutes);
  await app.register(objectRoutes);
  await app.register(objectLabelRoutes);
  await app.register(tableRoutes);
  await app.register(fileRoutes);
  await app.register(refRoutes);
  await app.register(feedbackRoutes);
  await app.register(costRoutes);
  await app.register(threadRoutes);
  await app.register(v2Routes);
  await app.register(otelRoutes);
  await app.register(completionRoutes);
  await app.register(projectRoutes);
};
