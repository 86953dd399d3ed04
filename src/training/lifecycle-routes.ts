import type { FastifyPluginAsyncZod, ZodTypeProvider } from 'fastify-type-provider-zod';
import { principalOf } from '../auth/plugin.js';
import type { AdapterService } from './adapter-service.js';
import type { LifecycleService } from './lifecycle-service.js';
import { BestCheckpoint, BestCheckpointQuery, CheckpointState, CheckpointStepParams, RetentionApplied, RetentionPolicy, RetentionPolicyBody } from './lifecycle-schemas.js';
import { CheckpointListQuery, ModelParams, Page } from './schemas.js';

/**
 * The checkpoint lifecycle under /v1/preview (docs/training.md, "Checkpoint lifecycle"): retention
 * policy, pins, and checkpoints with their lifecycle state. Errors as on every training route.
 */
export const lifecycleRoutes: FastifyPluginAsyncZod<{ lifecycle: LifecycleService; adapters: AdapterService; archiveLimitBytes: number }> = async (
  app,
  { lifecycle, adapters, archiveLimitBytes },
) => {
  const tags = ['training'];

  app.get(
    '/v1/preview/models/:model_id/retention',
    {
      schema: {
        tags,
        summary: 'Get Retention Policy',
        description: 'The model\'s retention policy; every field null (and `best_mode` max) keeps every checkpoint.',
        params: ModelParams,
        response: { 200: RetentionPolicy },
      },
    },
    async (request) => lifecycle.getRetention(principalOf(request), request.params.model_id),
  );

  app.put(
    '/v1/preview/models/:model_id/retention',
    {
      schema: {
        tags,
        summary: 'Set Retention Policy',
        description:
          'Replaces the policy (omitted fields are off). Keeps the latest `keep_latest`, the best `keep_best` by `best_metric` (`best_mode` max or min), every pinned checkpoint and the base of a running job; with `ttl_seconds`, the others expire that long after they were registered. Applied when a checkpoint lands, by the expiry sweep, and by POST .../retention/apply. `best_metric` must be a metric the model logged or its checkpoints carry, or `{train,val}/{reward,reward_std_dev,exception_rate}` (422).',
        params: ModelParams,
        body: RetentionPolicyBody,
        response: { 200: RetentionPolicy },
      },
    },
    async (request) => lifecycle.setRetention(principalOf(request), request.params.model_id, request.body),
  );

  app.post(
    '/v1/preview/models/:model_id/retention/apply',
    {
      schema: {
        tags,
        summary: 'Apply Retention Policy',
        description: 'Deletes now the checkpoints the policy does not keep and those whose TTL passed; the inference engines unload them.',
        params: ModelParams,
        response: { 200: RetentionApplied },
      },
    },
    async (request) => lifecycle.applyRetention(principalOf(request), request.params.model_id),
  );

  app.get(
    '/v1/preview/models/:model_id/checkpoints/lifecycle',
    {
      schema: {
        tags,
        summary: 'List Checkpoint Lifecycle',
        description:
          'The model\'s checkpoints by step, as List Model Checkpoints pages them, with `pinned`, `latest`, `best`, `expires_at` under the current policy, `source` and `created_at`.',
        params: ModelParams,
        querystring: CheckpointListQuery,
        response: { 200: Page(CheckpointState) },
      },
    },
    async (request) => lifecycle.listCheckpointStates(principalOf(request), request.params.model_id, request.query),
  );

  app.get(
    '/v1/preview/models/:model_id/checkpoints/best',
    {
      schema: {
        tags,
        summary: 'Get Best Checkpoint',
        description:
          'The checkpoint with the highest (`mode` max) or lowest (`min`) number for `metric` among all the model\'s checkpoints, ties going to the later step, as ART\'s `delete_checkpoints(best_checkpoint_metric=...)` picks the one it keeps; `checkpoint` is null when none has a number for it.',
        params: ModelParams,
        querystring: BestCheckpointQuery,
        response: { 200: BestCheckpoint },
      },
    },
    async (request) => lifecycle.bestCheckpoint(principalOf(request), request.params.model_id, request.query),
  );

  app.post(
    '/v1/preview/models/:model_id/checkpoints/:step/pin',
    {
      schema: {
        tags,
        summary: 'Pin Checkpoint',
        description: 'A pinned checkpoint is kept by every retention rule, never expires, and is spared by Delete Model Checkpoints (its `pinned_steps`).',
        params: CheckpointStepParams,
        response: { 200: CheckpointState },
      },
    },
    async (request) => lifecycle.setPinned(principalOf(request), request.params.model_id, request.params.step, true),
  );

  app.post(
    '/v1/preview/models/:model_id/checkpoints/:step/unpin',
    {
      schema: {
        tags,
        summary: 'Unpin Checkpoint',
        description: 'Removes the pin; the checkpoint is then subject to the retention policy again (applied at the next landing, sweep or apply).',
        params: CheckpointStepParams,
        response: { 200: CheckpointState },
      },
    },
    async (request) => lifecycle.setPinned(principalOf(request), request.params.model_id, request.params.step, false),
  );

  app.get(
    '/v1/preview/models/:model_id/checkpoints/:step/archive',
    {
      schema: {
        tags,
        summary: 'Export Checkpoint Adapter',
        description:
          'The checkpoint\'s PEFT adapter as a tar.gz (`application/gzip`): its adapter_config.json, adapter_model.safetensors and tokenizer files, when its URI is a directory this server can read. Stored elsewhere (s3://, a path only the engines see): 409 `adapter_unreadable`.',
        params: CheckpointStepParams,
      },
    },
    async (request, reply) => {
      const { filename, archive } = await adapters.exportArchive(principalOf(request), request.params.model_id, request.params.step);
      return reply.type('application/gzip').header('content-disposition', `attachment; filename="${filename}"`).send(archive);
    },
  );

  // Adapter archives arrive as the raw body, up to ADAPTER_ARCHIVE_LIMIT_MB: on the import route alone, in a
  // scope of its own, so that every other route here keeps BODY_LIMIT_MB and answers such a body 415.
  await app.register(async (plain) => {
    const scope = plain.withTypeProvider<ZodTypeProvider>();
    scope.addContentTypeParser(['application/gzip', 'application/x-tar', 'application/octet-stream'], { parseAs: 'buffer', bodyLimit: archiveLimitBytes }, (_request, body, done) =>
      done(null, body),
    );
    scope.post(
      '/v1/preview/models/:model_id/checkpoints/import',
      {
        schema: {
          tags,
          summary: 'Import Checkpoint Adapter',
          description:
            'Registers a PEFT adapter as the model\'s next checkpoint (`source` imported). Body: a tar or tar.gz of the adapter directory, content-type application/gzip, application/x-tar or application/octet-stream, at most ADAPTER_ARCHIVE_LIMIT_MB (413). It must hold adapter_config.json (its `base_model_name_or_path` equal to the model\'s base model, and a plain LoRA: no `modules_to_save`, `bias`, `trainable_token_indices`, `layer_replication`, base-rewriting `init_lora_weights`, DoRA or LoRA bias, and `peft_type` LORA) and adapter_model.safetensors, optionally tokenizer files; at most 16 regular files. Pickle weights, links, absolute or `..` paths and other files: 422 naming the entry. A running job of the model: 409 `job_running`.',
          params: ModelParams,
          response: { 200: CheckpointState },
        },
      },
      async (request) => adapters.importArchive(principalOf(request), request.params.model_id, request.body),
    );
  });
};
