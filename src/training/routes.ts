import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../auth/plugin.js';
import {
  BaseModelList,
  CheckpointListQuery,
  CheckpointPage,
  CreateSFTTrainingJob,
  CreateTrainingJob,
  DeleteCheckpointsRequest,
  DeleteCheckpointsResponse,
  DeleteModelResponse,
  ErrorDetail,
  EventListQuery,
  EventStreamHeaders,
  EventStreamQuery,
  ServerSentEvent,
  LogRequest,
  LogResponse,
  MetricHistory,
  METRIC_PAGE_LIMIT,
  MetricHistoryQuery,
  Model,
  ModelCreate,
  ModelListQuery,
  ModelParams,
  Page,
  TrainingJob,
  TrainingJobCreated,
  TrainingJobEventPage,
  TrainingJobListQuery,
  TrainingJobPage,
  TrainingJobParams,
  TrajectoryListQuery,
  StoredTrajectoryGroup,
} from './schemas.js';
import { unmarkResponse } from './exact-bodies.js';
import type { TrainingService } from './service.js';
import { EVENT_STREAM_BUSY_RETRY_SECONDS, EVENT_STREAMS_PER_KEY, type JobEventStreams } from './event-stream.js';

/**
 * The users' side of the training API under /v1/preview (reference §3; summaries are the seed's operation
 * names). Handlers call one service function each; errors are `{"detail": ...}`, validation FastAPI 422.
 */
export const previewRoutes: FastifyPluginAsyncZod<{ service: TrainingService; streams: JobEventStreams }> = async (app, { service, streams }) => {
  const tags = ['training'];

  app.post(
    '/v1/preview/models',
    {
      schema: {
        tags,
        summary: 'Create Model',
        description:
          'Registers a trainable model. A null entity means the key\'s own. The same (entity, project, name) again returns the existing model with `return_existing`, else 409. `base_model` must be one of GET /v1/preview/base-models when that list is not empty (422).',
        body: ModelCreate,
        response: { 200: Model },
      },
    },
    async (request) => service.createModel(principalOf(request), request.body),
  );

  app.get(
    '/v1/preview/models',
    {
      schema: {
        tags,
        summary: 'List Models',
        description: 'Models the key reaches, oldest first, optionally of one entity and project; `after` is a model id from an earlier page.',
        querystring: ModelListQuery,
        response: { 200: Page(Model) },
      },
    },
    async (request) => service.listModels(principalOf(request), request.query),
  );

  app.get(
    '/v1/preview/base-models',
    {
      schema: {
        tags,
        summary: 'List Base Models',
        description: 'The base models this server trains (TRAINABLE_BASE_MODELS); an empty list means any base model is accepted.',
        response: { 200: BaseModelList },
      },
    },
    async () => service.baseModels(),
  );

  app.get(
    '/v1/preview/models/:model_id',
    { schema: { tags, summary: 'Get Model', params: ModelParams, response: { 200: Model } } },
    async (request) => service.getModel(principalOf(request), request.params.model_id),
  );

  app.delete(
    '/v1/preview/models/:model_id',
    {
      schema: {
        tags,
        summary: 'Delete Model',
        description:
          'Deletes the model, its checkpoints, logged trajectories and metrics; cancels its queued jobs and asks its running ones to stop. A model already deleted (a retry after a lost response) answers the same with `deleted_checkpoints` 0.',
        params: ModelParams,
        response: { 200: DeleteModelResponse },
      },
    },
    async (request) => service.deleteModel(principalOf(request), request.params.model_id),
  );

  app.get(
    '/v1/preview/models/:model_id/checkpoints',
    {
      schema: {
        tags,
        summary: 'List Model Checkpoints',
        description:
          'Checkpoints by step (`order`, default asc). `after` is a checkpoint id of this model (unknown: 422). Past the end: empty `data`, `has_more` false, ids "". `limit=1&order=desc` gives the latest step.',
        params: ModelParams,
        querystring: CheckpointListQuery,
        response: { 200: CheckpointPage },
      },
    },
    async (request) => service.listCheckpoints(principalOf(request), request.params.model_id, request.query),
  );

  app.get(
    '/v1/preview/models/:model_id/trajectories',
    {
      schema: {
        tags,
        summary: 'List Stored Trajectory Groups',
        description:
          'The trajectory groups logged at one `split` and `step`, in the order they were logged (the web UI\'s rollouts view). `after` is the `id` of the last group of the previous page.',
        params: ModelParams,
        querystring: TrajectoryListQuery,
        response: { 200: Page(StoredTrajectoryGroup) },
      },
      onSend: unmarkResponse,
    },
    async (request) => service.trajectories(principalOf(request), request.params.model_id, request.query),
  );

  app.delete(
    '/v1/preview/models/:model_id/checkpoints',
    {
      schema: {
        tags,
        summary: 'Delete Model Checkpoints',
        description: 'Deletes the checkpoints at the given steps (a JSON body on DELETE, as the ART client sends it).',
        params: ModelParams,
        body: DeleteCheckpointsRequest,
        response: { 200: DeleteCheckpointsResponse },
      },
    },
    async (request) => service.deleteCheckpoints(principalOf(request), request.params.model_id, request.body),
  );

  app.post(
    '/v1/preview/models/:model_id/log',
    {
      schema: {
        tags,
        summary: 'Log',
        description:
          'Stores the trajectory groups and computes ART\'s metrics (`{split}/reward`, `{split}/reward_std_dev`, `{split}/exception_rate`, metric means, `data/*`) at the model\'s current step, merged into that step\'s checkpoint metrics.',
        params: ModelParams,
        body: LogRequest,
        response: { 200: LogResponse },
      },
    },
    async (request) => service.log(principalOf(request), request.params.model_id, request.body, request.heldIntegers),
  );

  app.get(
    '/v1/preview/models/:model_id/metrics',
    {
      schema: {
        tags,
        summary: 'Get Model Metric History',
        description: `The metrics of every log call, oldest step first (then in log order; \`order=desc\`: newest first), optionally of one split; pages of up to ${METRIC_PAGE_LIMIT} records (\`after\` = the last record's id).`,
        params: ModelParams,
        querystring: MetricHistoryQuery,
        response: { 200: MetricHistory },
      },
    },
    async (request) => service.metricHistory(principalOf(request), request.params.model_id, request.query),
  );

  app.post(
    '/v1/preview/training-jobs',
    {
      schema: {
        tags,
        summary: 'Create Rl Training Job',
        description: 'Queues one RL training step on the inline trajectory groups; progress is read from the job\'s events.',
        body: CreateTrainingJob,
        response: { 200: TrainingJobCreated },
      },
    },
    async (request) => service.createRlJob(principalOf(request), request.body, request.heldIntegers),
  );

  app.post(
    '/v1/preview/sft-training-jobs',
    {
      schema: {
        tags,
        summary: 'Create Sft Training Job',
        description:
          '`training_data_url` (alias `training_folder_url`): a tracing ref of a dataset object or table (weave:///entity/project/object/name:digest, weave:///entity/project/table/digest) or the digest of a JSONL file stored with /traces/file/create; http(s) URLs only when SFT_ALLOW_HTTP_URLS is on. Rows are resolved and copied into the job now: one that does not resolve is a 422.',
        body: CreateSFTTrainingJob,
        response: { 200: TrainingJobCreated },
      },
    },
    async (request) => service.createSftJob(principalOf(request), request.body),
  );

  app.get(
    '/v1/preview/training-jobs',
    {
      schema: {
        tags,
        summary: 'List Training Jobs',
        description: 'Jobs the key reaches, newest first, optionally of one model or status; `after` is a job id from an earlier page.',
        querystring: TrainingJobListQuery,
        response: { 200: TrainingJobPage },
      },
    },
    async (request) => service.listJobs(principalOf(request), request.query),
  );

  app.get(
    '/v1/preview/training-jobs/:training_job_id',
    { schema: { tags, summary: 'Get Training Job', params: TrainingJobParams, response: { 200: TrainingJob } } },
    async (request) => service.getJob(principalOf(request), request.params.training_job_id),
  );

  app.post(
    '/v1/preview/training-jobs/:training_job_id/cancel',
    {
      schema: {
        tags,
        summary: 'Cancel Training Job',
        description: 'QUEUED: CANCELED at once. RUNNING: `cancel_requested`, CANCELED when the worker reports or its lease lapses. A finished job is returned unchanged.',
        params: TrainingJobParams,
        response: { 200: TrainingJob },
      },
    },
    async (request) => service.cancelJob(principalOf(request), request.params.training_job_id),
  );

  app.get(
    '/v1/preview/training-jobs/:training_job_id/events',
    {
      schema: {
        tags,
        summary: 'Get Training Job Events',
        description:
          'Events in append order: training_started {num_sequences}, gradient_step {numbers}, then training_ended or training_failed {error_message}. `after` returns events strictly after that event; an unknown `after` starts from the beginning.',
        params: TrainingJobParams,
        querystring: EventListQuery,
        response: { 200: TrainingJobEventPage },
      },
    },
    async (request) => service.listEvents(principalOf(request), request.params.training_job_id, request.query),
  );

  app.get(
    '/v1/preview/training-jobs/:training_job_id/events/stream',
    {
      schema: {
        tags,
        summary: 'Stream Training Job Events',
        description:
          'Server-sent events (text/event-stream), for EventSource and `curl -N`: `job` {the training job} first and whenever it changes, then each event once in append order as `id: <event id>`, `event: <type>`, `data: {id, type, data}`, and `end` {the training job} after the last event of a finished job, when the stream closes. ' +
          '`after`, or the `Last-Event-ID` header a reconnecting EventSource sends (it wins), starts after that event; an unknown one starts from the beginning. ' +
          `A comment line (\`: keep-alive\`) comes after 15 s without a message; the stream closes after \`max_seconds\` (at most and by default 600) or when the key no longer reaches the job, and EventSource reconnects where it was. A key may hold ${EVENT_STREAMS_PER_KEY} streams open at once in one trainyard process (429 with Retry-After ${EVENT_STREAM_BUSY_RETRY_SECONDS} s beyond).`,
        params: TrainingJobParams,
        querystring: EventStreamQuery,
        headers: EventStreamHeaders,
        response: {
          200: { description: 'Server-sent events', content: { 'text/event-stream': { schema: ServerSentEvent } } },
          404: ErrorDetail,
          429: ErrorDetail,
        },
      },
    },
    async (request, reply) => {
      const gone = new AbortController();
      reply.raw.once('close', () => gone.abort());
      const after = request.headers['last-event-id'] ?? request.query.after;
      const stream = await streams.open(principalOf(request), request.params.training_job_id, { after, maxSeconds: request.query.max_seconds }, gone.signal);
      // no-transform and X-Accel-Buffering keep proxies from buffering or compressing the stream.
      reply.type('text/event-stream; charset=utf-8').header('cache-control', 'no-cache, no-transform').header('x-accel-buffering', 'no');
      return reply.send(stream as never);
    },
  );
};
