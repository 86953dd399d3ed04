import { Readable } from 'node:stream';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { principalOf } from '../auth/plugin.js';
import {
  ClaimRequest,
  ClaimResponse,
  CompleteRequest,
  CompleteResponse,
  ErrorDetail,
  FailRequest,
  FailResponse,
  HeartbeatRequest,
  HeartbeatResponse,
  Page,
  PostEventsRequest,
  PostEventsResponse,
  ResidentTrainer,
  WorkerJobParams,
  WorkerSettingsResponse,
} from './schemas.js';
import { CLAIM_BUSY_RETRY_SECONDS, type WorkerService } from './worker-service.js';

const AdminWorkersQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(100),
  after: z.string().max(256).optional().describe('The `last_id` of the page before.'),
});

const AdminWorkerPage = Page(
  z.object({
    id: z.string().describe('This row: one per worker id and API key.'),
    worker_id: z.string(),
    api_key_id: z.string().nullable().describe('The key the worker claims with.'),
    last_seen_at: z.string(),
    resident_trainers: z.array(ResidentTrainer),
  }),
);

/**
 * The trainer-worker protocol under /v1/workers (worker keys only, each reaching the jobs of its user's
 * entities, an admin's every job; docs/workers.md). Every call that carries a lease token answers 409
 * `{"detail": ...}` when the token is not the job's current lease.
 */
export const workerRoutes: FastifyPluginAsyncZod<{ workers: WorkerService }> = async (app, { workers }) => {
  const tags = ['workers'];
  const config = { auth: 'worker' as const };

  app.get(
    '/v1/admin/workers',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['admin'],
        summary: 'List trainer workers seen recently',
        description:
          'Workers that called in within WORKER_SEEN_SECONDS, most recent first, one per worker id and key, with the resident trainers each reported with its latest claim (what each keeps loaded). Paged: `limit` (1-100, default 100) and `after` (the `last_id` of the page before); a worker that calls in while you page moves to the front.',
        querystring: AdminWorkersQuery,
        response: { 200: AdminWorkerPage },
      },
    },
    async (request) => workers.recentWorkers(request.query),
  );

  app.get(
    '/v1/workers/settings',
    {
      config,
      schema: {
        tags,
        summary: 'Read the settings a worker must fit',
        description:
          'The server settings a worker checks its own against when it starts: `checkpoint_uri_prefixes` (CHECKPOINT_URI_PREFIXES), the prefixes a checkpoint URI must start with to be registered. `trainyard-worker` warns at start when its `--output-dir` lies under none of them, since every job it completes would then be refused at its end.',
        response: { 200: WorkerSettingsResponse },
      },
    },
    async () => ({ checkpoint_uri_prefixes: [...app.config.checkpointUriPrefixes] }),
  );

  app.post(
    '/v1/workers/claim',
    {
      config,
      schema: {
        tags,
        summary: 'Claim a training job',
        description:
          'Takes the next queued job that may run (a model\'s jobs run one at a time, in creation order; entities take turns, oldest job first within one, and MAX_RUNNING_JOBS_PER_ENTITY bounds one entity\'s running jobs), optionally only of some kinds or base models, and leases it (WORKER_LEASE_SECONDS, default 60 s; renew with heartbeats). Waits up to `wait_seconds` (at most 30) for one. 204 when none came. `target_step` is the latest checkpoint\'s step + 1; `base_checkpoint` is null when training starts from the base model.',
        body: ClaimRequest,
        response: {
          200: ClaimResponse,
          204: z.null().describe('No job is queued for this worker.'),
          429: ErrorDetail.describe(`The key already holds WORKER_CLAIM_WAITS_PER_KEY waiting claims; Retry-After (${CLAIM_BUSY_RETRY_SECONDS} s) says when to try again.`),
        },
      },
    },
    async (request, reply) => {
      // A worker that hung up must not be handed a job it will never run.
      const gone = new AbortController();
      reply.raw.once('close', () => gone.abort());
      const claim = await workers.claim(principalOf(request), request.body, gone.signal);
      if (!claim) return reply.status(204).send(null);
      return claim;
    },
  );

  app.get(
    '/v1/workers/jobs/:job_id/inputs',
    {
      config,
      schema: {
        tags,
        summary: 'Stream a job\'s inputs',
        description: 'JSON Lines (application/x-ndjson): one trajectory group per line for RL, one training row {messages, tools?} per line for SFT, in the order sent. Streamed as read.',
        params: WorkerJobParams,
        response: {
          200: { description: 'JSON Lines, one input per line', content: { 'application/x-ndjson': { schema: z.string() } } },
          404: ErrorDetail,
        },
      },
    },
    async (request, reply) => {
      await workers.requireJob(principalOf(request), request.params.job_id);
      reply.type('application/x-ndjson; charset=utf-8');
      return reply.send(Readable.from(workers.inputLines(request.params.job_id)) as never);
    },
  );

  app.post(
    '/v1/workers/jobs/:job_id/heartbeat',
    {
      config,
      schema: {
        tags,
        summary: 'Renew a lease',
        description: 'Extends the lease; `cancel_requested` true means the user canceled the job: stop, then call fail (the job ends CANCELED).',
        params: WorkerJobParams,
        body: HeartbeatRequest,
        response: { 200: HeartbeatResponse, 409: ErrorDetail },
      },
    },
    async (request) => workers.heartbeat(principalOf(request), request.params.job_id, request.body.lease_token),
  );

  app.post(
    '/v1/workers/jobs/:job_id/events',
    {
      config,
      schema: {
        tags,
        summary: 'Post training events',
        description:
          '`training_started {num_sequences}` first and once per attempt, then `gradient_step` events whose data values are finite numbers. A batch that breaks a rule is refused whole (422).',
        params: WorkerJobParams,
        body: PostEventsRequest,
        response: { 200: PostEventsResponse, 409: ErrorDetail },
      },
    },
    async (request) => workers.postEvents(principalOf(request), request.params.job_id, request.body),
  );

  app.post(
    '/v1/workers/jobs/:job_id/complete',
    {
      config,
      schema: {
        tags,
        summary: 'Complete a job with its checkpoint',
        description:
          'In one transaction: the checkpoint at `target_step`, the `training_ended` event, COMPLETED and `training_end`. The same call with the same token again returns the same result. 409 for a stale token, or when the job was canceled (no checkpoint is registered then). 422 for a `uri` outside CHECKPOINT_URI_PREFIXES or with `.`/`..` segments.',
        params: WorkerJobParams,
        body: CompleteRequest,
        response: { 200: CompleteResponse, 409: ErrorDetail },
      },
    },
    async (request) => workers.complete(principalOf(request), request.params.job_id, request.body),
  );

  app.post(
    '/v1/workers/jobs/:job_id/fail',
    {
      config,
      schema: {
        tags,
        summary: 'Report a failed attempt',
        description:
          '`retryable` with attempts left (JOB_MAX_ATTEMPTS): QUEUED again with attempt + 1. Otherwise FAILED with a `training_failed` event; CANCELED when a cancel was asked for.',
        params: WorkerJobParams,
        body: FailRequest,
        response: { 200: FailResponse, 409: ErrorDetail },
      },
    },
    async (request) => workers.fail(principalOf(request), request.params.job_id, request.body),
  );
};
