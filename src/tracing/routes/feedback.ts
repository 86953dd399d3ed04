import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../../auth/plugin.js';
import { depsOf, projectFor } from '../http/access.js';
import { Empty, tags } from '../schemas/common.js';
import {
  FeedbackBatchCreateBody,
  FeedbackBatchCreateResponse,
  FeedbackCreateBody,
  FeedbackCreateResponse,
  FeedbackPurgeBody,
  FeedbackQueryBody,
  FeedbackQueryResponse,
  FeedbackReplaceBody,
} from '../schemas/feedback.js';
import * as feedback from '../services/feedback.js';

export const feedbackRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/feedback/create',
    {
      config: { exactNumbers: true },
      schema: {
        tags,
        summary: 'Create feedback on a ref',
        description: 'Validated and normalised as the weave server does (reactions get alias, detoned and detoned_alias). The answer carries the stored payload.',
        body: FeedbackCreateBody,
        response: { 200: FeedbackCreateResponse },
      },
    },
    async (request) => {
      projectFor(request, request.body.project_id);
      const [created] = await feedback.createFeedback(deps, { userId: principalOf(request).userId, items: [request.body] });
      return created;
    },
  );

  app.post(
    '/feedback/batch/create',
    { config: { exactNumbers: true }, schema: { tags, summary: 'Create several feedback rows, all or nothing', body: FeedbackBatchCreateBody, response: { 200: FeedbackBatchCreateResponse } } },
    async (request) => {
      for (const projectId of new Set(request.body.batch.map((item) => item.project_id))) projectFor(request, projectId, 'batch.project_id');
      return { res: await feedback.createFeedback(deps, { userId: principalOf(request).userId, items: request.body.batch }) };
    },
  );

  app.post(
    '/feedback/query',
    { config: { exactNumbers: true }, schema: { tags, summary: 'Query feedback', body: FeedbackQueryBody, response: { 200: FeedbackQueryResponse } } },
    async (request) => {
      const { body } = request;
      const projectId = projectFor(request, body.project_id);
      return feedback.queryFeedback(deps, { projectId, fields: body.fields, query: body.query, sortBy: body.sort_by, limit: body.limit, offset: body.offset });
    },
  );

  app.post(
    '/feedback/purge',
    { schema: { tags, summary: 'Delete feedback by id', description: 'The query may only name ids; anything else is a 400.', body: FeedbackPurgeBody, response: { 200: Empty } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await feedback.purgeFeedback(deps, { projectId, query: request.body.query });
      return {};
    },
  );

  app.post(
    '/feedback/replace',
    {
      config: { exactNumbers: true },
      schema: {
        tags,
        summary: 'Replace a feedback row',
        description: 'Validates the new feedback, deletes feedback_id and creates the new row (a new id unless one is given) in one transaction.',
        body: FeedbackReplaceBody,
        response: { 200: FeedbackCreateResponse },
      },
    },
    async (request) => {
      projectFor(request, request.body.project_id);
      const { feedback_id: feedbackId, ...item } = request.body;
      return feedback.replaceFeedback(deps, { userId: principalOf(request).userId, feedbackId, item });
    },
  );
};
