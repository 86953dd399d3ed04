import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod, ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { principalOf } from '../auth/plugin.js';
import { InvalidRequestError } from '../errors.js';
import { unmarkNumbers } from '../http/exact-numbers.js';
import { registerJsonBodyParser } from '../http/json-body.js';
import type { WandbService } from './service.js';

const tags = ['wandb'];
const NAME = z.string().min(1).max(128);

const FileStreamParams = z.object({ entity: NAME, project: NAME, run: NAME });
/**
 * What the SDK streams: whole files split into lines at offsets; `complete` on the last request. A line
 * is bounded by the body limit alone: wandb-core treats a refused request as fatal and stops streaming,
 * so one large row (a long text, a wide table) would cost the run all its history.
 */
const FileStreamBody = z.object({
  files: z
    .record(z.string().max(256), z.object({ offset: z.number().int().min(0).max(1_000_000), content: z.array(z.string()).max(10_000) }))
    .refine((files) => Object.keys(files).length <= 32, 'at most 32 files')
    .optional(),
  complete: z.boolean().optional(),
  // wandb-core's exit code is an int32, as the column is.
  exitcode: z.int32().nullish(),
  preempting: z.boolean().optional(),
  uploaded: z.array(z.string().max(512)).max(1_000).optional(),
  dropped: z.number().int().optional(),
});
const FileStreamResponse = z.object({ exitcode: z.null(), limits: z.object({}) });

const RunParams = z.object({ entity: NAME, project: NAME, run: NAME });
const ProjectParams = z.object({ entity: NAME, project: NAME });
const RunsQuery = z.object({
  name: NAME.optional().describe('Only the run of this name (ART names the run after the model).'),
  limit: z.coerce.number().int().min(1).max(100).default(100),
});
const RunState = z.enum(['running', 'finished', 'failed']);
const WandbRunListing = z.object({
  entity: z.string(),
  project: z.string(),
  name: z.string(),
  display_name: z.string().nullable(),
  state: RunState,
  history_rows: z.number().int().describe('History lines the SDK streamed.'),
});
const HistoryQuery = z.object({
  after_step: z.coerce.number().int().min(-1).default(-1).describe('Only steps after this one.'),
  limit: z.coerce.number().int().min(1).max(10_000).default(1_000),
});
const WandbRunHistory = z
  .object({
    entity: z.string(),
    project: z.string(),
    name: z.string(),
    display_name: z.string().nullable(),
    state: RunState,
    summary: z.record(z.string(), z.unknown()),
    history: z.array(z.object({ step: z.number().int(), values: z.record(z.string(), z.unknown()) })),
    has_more: z.boolean(),
  })
  .describe('A W&B run as the wandb SDK wrote it: its summary and its history rows by `_step`.');

const TokenParams = z.object({ token: z.string().min(1).max(64) });
const Stored = z.object({ stored: z.literal(true) });
const Bytes = z.unknown().describe('The file\'s bytes (application/octet-stream).');

/**
 * The W&B REST routes the wandb SDK calls beside GraphQL: a run's file_stream (authenticated, like
 * GraphQL), and the upload and download URLs that GraphQL answers mint. Those carry no key (the SDK sends
 * none to them): each holds a random token that names one file, and an upload is taken only when its
 * bytes have the MD5 announced for that file.
 */
export const wandbRoutes: FastifyPluginAsyncZod<{ wandb: WandbService }> = async (app, { wandb }) => {
  registerJsonBodyParser(app, { rejectNul: true });
  app.post(
    '/files/:entity/:project/:run/file_stream',
    {
      schema: {
        tags,
        summary: 'W&B: stream a run\'s history, summary and end',
        description: 'History lines are stored at their offsets (a retried request rewrites the same lines); the summary replaces the last one; `complete` ends the run. System metrics and console output are accepted and not kept.',
        params: FileStreamParams,
        body: FileStreamBody,
        response: { 200: FileStreamResponse },
      },
    },
    async (request) => {
      const { entity, project, run } = request.params;
      await wandb.fileStream(principalOf(request), { entity, project, run, body: request.body });
      return { exitcode: null, limits: {} };
    },
  );

  app.get(
    '/v1/preview/wandb-runs/:entity/:project',
    {
      schema: {
        tags,
        summary: 'List a project\'s W&B runs',
        description: 'The runs the wandb SDK created in this project, by name, without their history (an empty list when there are none).',
        params: ProjectParams,
        querystring: RunsQuery,
        response: { 200: z.object({ data: z.array(WandbRunListing) }) },
      },
    },
    async (request) => wandb.listRuns(principalOf(request), { ...request.params, ...request.query }),
  );

  app.get(
    '/v1/preview/wandb-runs/:entity/:project/:run/history',
    {
      schema: {
        tags,
        summary: 'Read a W&B run\'s history and summary',
        description: 'What `wandb.init` / `run.log` / `run.summary` wrote for this run (ART\'s `model.log` with W&B on writes to the run named after the model), one row per `_step`, oldest first.',
        params: RunParams,
        querystring: HistoryQuery,
        response: { 200: WandbRunHistory },
      },
      // Integers beyond 2^53 are answered with the digits the SDK sent (service.ts, parseStored).
      onSend: async (_request, _reply, payload) => (typeof payload === 'string' ? unmarkNumbers(payload) : payload),
    },
    async (request) => wandb.runHistory(principalOf(request), { ...request.params, afterStep: request.query.after_step, limit: request.query.limit }),
  );

  await app.register(async (scope) => {
    const bytes = scope.withTypeProvider<ZodTypeProvider>();
    const limit = app.config.bodyLimitBytes;
    bytes.removeAllContentTypeParsers();
    bytes.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: limit }, (_request, body, done) => done(null, body));
    const upload = (
      summary: string,
      target: (token: string) => Promise<unknown>,
      store: (token: string, data: Buffer, contentMd5: string | undefined) => Promise<void>,
    ) => ({
      config: { auth: 'none' as const },
      bodyLimit: limit,
      // The URL is the only credential: one that takes no upload is refused before the body is read, so
      // that anyone cannot have the server hold BODY_LIMIT_MB for a made-up URL.
      onRequest: async (request: FastifyRequest) => {
        await target((request.params as { token: string }).token);
      },
      schema: { tags, summary, description: 'The URL comes from a GraphQL answer and needs no key. The body is the raw bytes; a Content-MD5 header, when sent, must match them.', params: TokenParams, consumes: ['application/octet-stream'], response: { 200: Stored } },
      handler: async (request: FastifyRequest<{ Params: { token: string } }>) => {
        const header = request.headers['content-md5'];
        if (Array.isArray(header)) throw new InvalidRequestError('Send one Content-MD5 header.');
        const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
        await store(request.params.token, body, header);
        return { stored: true as const };
      },
    });
    bytes.put('/wandb/artifact-files/:token', upload('W&B: upload an artifact file', (t) => wandb.artifactFileUpload(t), (t, d, m) => wandb.uploadArtifactFile(t, d, m)));
    bytes.put('/wandb/manifests/:token', upload('W&B: upload an artifact manifest', (t) => wandb.manifestUpload(t), (t, d, m) => wandb.uploadManifest(t, d, m)));
    bytes.put('/wandb/run-files/:token', upload('W&B: upload a run file', (t) => wandb.runFileUpload(t), (t, d, m) => wandb.uploadRunFile(t, d, m)));

    bytes.get(
      '/wandb/artifact-files/:token',
      {
        config: { auth: 'none' },
        schema: { tags, summary: 'W&B: download a committed artifact file', description: 'The URL is a GraphQL answer\'s `directUrl` and needs no key.', params: TokenParams, produces: ['application/octet-stream'], response: { 200: Bytes } },
      },
      async (request, reply) => {
        const data = await wandb.downloadArtifactFile(request.params.token);
        return reply.type('application/octet-stream').send(data);
      },
    );
    bytes.get(
      '/wandb/manifests/:token',
      {
        config: { auth: 'none' },
        schema: { tags, summary: 'W&B: download a committed artifact\'s manifest', description: 'The URL is a GraphQL answer\'s `currentManifest.file.directUrl` and needs no key.', params: TokenParams, response: { 200: z.record(z.string(), z.unknown()) } },
      },
      async (request) => wandb.downloadManifest(request.params.token),
    );
  });
};
