import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import OpenAI from 'openai';
import { Agent, request } from 'undici';
import type { App } from '../../src/app.js';
import { adapterName } from '../../src/inference/router.js';
import { createTestApp } from '../helpers/app.js';

/** One backend as written in the backends file, with short, test-friendly timeouts. */
export function backendEntry(name: string, replicas: string[], overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const { timeouts, ...rest } = overrides;
  return {
    name,
    kind: 'openai-compatible',
    replicas,
    models: ['fake/base-model'],
    runtime_lora: true,
    ...rest,
    timeouts: { connect_ms: 1_000, first_byte_ms: 5_000, idle_ms: 5_000, total_ms: 20_000, adapter_load_ms: 5_000, ...(timeouts as object) },
  };
}

export function writeBackendsFile(backends: Record<string, unknown>[]): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-backends-'));
  const file = path.join(dir, 'backends.json');
  fs.writeFileSync(file, JSON.stringify({ backends }));
  return file;
}

/** The app with these backends; usage is flushed every 50 ms unless env says otherwise. */
export async function createGatewayApp(backends: Record<string, unknown>[], env: Record<string, string> = {}): Promise<App> {
  return createTestApp({ BACKENDS_FILE: writeBackendsFile(backends), USAGE_FLUSH_INTERVAL_MS: '50', ...env });
}

/**
 * Inserts a trained model and its checkpoints straight into the training tables, as training would
 * leave them. Checkpoint URIs are `s3://ckpts/<name>/<step>`.
 */
export async function createTrainedModel(
  app: App,
  args: { entity: string; project: string; name: string; baseModel?: string; steps?: number[] },
): Promise<{ id: string; uri(step: number): string }> {
  const entity = await app.db.selectFrom('entities').select('id').where('name', '=', args.entity).executeTakeFirstOrThrow();
  const id = randomUUID();
  await app.db
    .insertInto('models')
    .values({ id, entity_id: entity.id, project: args.project, name: args.name, base_model: args.baseModel ?? 'fake/base-model', run_id: null, deleted_at: null })
    .execute();
  const uri = (step: number) => `s3://ckpts/${args.name}/${step}`;
  for (const step of args.steps ?? []) await addCheckpoint(app, id, step, uri(step));
  return { id, uri };
}

export async function addCheckpoint(app: App, modelId: string, step: number, uri: string): Promise<void> {
  // metrics keeps its column default ({}).
  await sql`insert into checkpoints (id, model_id, step, uri) values (${randomUUID()}, ${modelId}, ${step}, ${uri})`.execute(app.db);
}

/** The ids of a model's checkpoints, by step: what a checkpoints-deleted event carries. */
export async function checkpointIds(app: App, modelId: string): Promise<string[]> {
  const rows = await app.db.selectFrom('checkpoints').select('id').where('model_id', '=', modelId).orderBy('step').execute();
  return rows.map((row) => row.id);
}

export const chat = (model: string, overrides: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: 'Hi' }],
  ...overrides,
});

/** The 404 every model a key cannot use answers, whether another tenant's or nobody's. */
export const modelNotFoundBody = (model: string) => ({
  error: { message: `The model \`${model}\` does not exist or you do not have access to it.`, type: 'invalid_request_error', param: 'model', code: 'model_not_found' },
});

/** The `data:` payloads of an SSE body. */
export function sseData(body: string): string[] {
  return body
    .split('\n\n')
    .filter((block) => block.startsWith('data: '))
    .map((block) => block.slice(6));
}

/**
 * The openai SDK over a dispatcher of its own. Closing it first lets the app close: after a stream
 * is abandoned, undici may open a spare connection that the server would otherwise wait on.
 */
export function openaiClient(baseURL: string, apiKey: string, options: ConstructorParameters<typeof OpenAI>[0] = {}): { client: OpenAI; close(): Promise<void> } {
  const agent = new Agent();
  const client = new OpenAI({ apiKey, baseURL, maxRetries: 0, fetchOptions: { dispatcher: agent } as never, ...options });
  return { client, close: () => agent.close() };
}

/** undici's `request` over a dispatcher of its own, closed before the app for the reason openaiClient gives. */
export function undiciClient(): { request: typeof request; close(): Promise<void> } {
  const agent = new Agent();
  const own = ((url: Parameters<typeof request>[0], options: Parameters<typeof request>[1] = {}) =>
    request(url, { ...options, dispatcher: agent })) as typeof request;
  return { request: own, close: () => agent.close() };
}

/** The engine-side adapter name of a stored checkpoint (its name, step and a hash of its id). */
export async function checkpointAdapter(app: App, args: { entity: string; project: string; name: string; step: number }): Promise<string> {
  const row = await app.db
    .selectFrom('checkpoints as c')
    .innerJoin('models as m', 'm.id', 'c.model_id')
    .innerJoin('entities as e', 'e.id', 'm.entity_id')
    .select('c.id')
    .where('e.name', '=', args.entity)
    .where('m.project', '=', args.project)
    .where('m.name', '=', args.name)
    .where('m.deleted_at', 'is', null)
    .where('c.step', '=', args.step)
    .executeTakeFirstOrThrow();
  return adapterName({ entity: args.entity, project: args.project, model: args.name }, args.step, row.id);
}

/** The usage row of one request, once the background writer has written it. */
export async function usageRow(app: App, requestId: string): Promise<Record<string, unknown>> {
  let row: Record<string, unknown> | undefined;
  for (let i = 0; i < 100 && !row; i++) {
    row = await app.db.selectFrom('usage_records').selectAll().where('request_id', '=', requestId).executeTakeFirst();
    if (!row) await new Promise((resolve) => setTimeout(resolve, 50));
  }
  if (!row) throw new Error(`no usage row for ${requestId}`);
  return row;
}
