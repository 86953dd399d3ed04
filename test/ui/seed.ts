import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { App } from '../../src/app.js';
import type { TestUser } from '../helpers/app.js';
import { call, groupGenerationA, ScriptedWorker, type ClaimedJob } from '../training/fixtures.js';

/** Seed data for the browser suite, written through the real APIs (training, worker protocol, tracing). */

async function ok(reply: Promise<{ status: number; text: string; body: any }>, what: string): Promise<any> {
  const r = await reply;
  if (r.status !== 200) throw new Error(`${what} answered ${r.status}: ${r.text}`);
  return r.body;
}

/**
 * A model trained for `steps` steps: at each step `train` and `val` groups are logged (rewards rising
 * with the step, one group of equal rewards), then an RL job runs on a scripted worker and registers the
 * next checkpoint with its loss.
 */
export async function seedTrainedModel(app: App, user: TestUser, args: { project: string; name: string; steps: number }) {
  const baseModel = `base-${randomUUID().slice(0, 8)}`;
  const model = await ok(call(app, user.headers, 'POST', '/v1/preview/models', { project: args.project, name: args.name, base_model: baseModel }), 'create model');
  const worker = await ScriptedWorker.create(app, user, [baseModel]);
  for (let step = 0; step < args.steps; step++) {
    const r = step / args.steps;
    const train = [groupGenerationA([r, r / 2, 1]), groupGenerationA([r / 3, 0.5]), groupGenerationA([0.25, 0.25])];
    await ok(call(app, user.headers, 'POST', `/v1/preview/models/${model.id}/log`, { split: 'train', trajectory_groups: train }), 'log train');
    await ok(call(app, user.headers, 'POST', `/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [groupGenerationA([r, 0.2])] }), 'log val');
    await ok(call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: train }), 'create job');
    const claimed = (await worker.claim())!;
    await ok(worker.events(claimed, [{ type: 'training_started', data: { num_sequences: 2 } }]), 'started');
    await ok(worker.events(claimed, [{ type: 'gradient_step', data: { loss: 1 / (step + 1), grad_norm: 0.4, learning_rate: 5e-6 } }]), 'step');
    await ok(worker.complete(claimed, { 'loss/train': 1 / (step + 1) }), 'complete');
  }
  return { model, worker, baseModel };
}

/** A queued job of `model` and a worker that can claim it, for watching a job live. */
export async function queueJob(app: App, user: TestUser, model: { id: string }, worker: ScriptedWorker): Promise<{ jobId: string; claim(): Promise<ClaimedJob> }> {
  const job = await ok(call(app, user.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] }), 'create job');
  return { jobId: job.id, claim: async () => (await worker.claim())! };
}

/** `count` metric rows straight into metric_history: more steps than the API can log in a test (it logs one step per checkpoint). */
export async function insertMetricRows(app: App, modelId: string, count: number): Promise<void> {
  await sql`
    insert into metric_history (model_id, step, split, metrics)
    select ${modelId}, g, 'train', jsonb_build_object('train/reward', 0.5 + 0.4 * sin(g / 300.0), 'train/reward_std_dev', 0.1)
    from generate_series(0, ${count - 1}) g`.execute(app.db);
}

export interface SeededCall {
  id: string;
  trace_id: string;
  parent_id?: string;
  op_name: string;
  display_name?: string;
  thread_id?: string;
  turn_id?: string;
  inputs?: Record<string, unknown>;
  output?: unknown;
  exception?: string;
  startedAt: Date;
  latencyMs?: number;
  summary?: Record<string, unknown>;
}

/** The string that upsertCalls sends as the number `1.0`, as a Python client writes it (JSON.stringify would write `1`). */
export const WHOLE_FLOAT_ONE = '__whole_float_1.0__';

/** Calls through /traces/call/upsert_batch (start and end of each), in batches. */
export async function upsertCalls(app: App, user: TestUser, project: string, calls: SeededCall[]): Promise<void> {
  for (let i = 0; i < calls.length; i += 500) {
    const batch = calls.slice(i, i + 500).flatMap((c) => [
      {
        mode: 'start',
        req: {
          start: {
            project_id: project,
            id: c.id,
            trace_id: c.trace_id,
            parent_id: c.parent_id ?? null,
            op_name: c.op_name,
            display_name: c.display_name ?? null,
            thread_id: c.thread_id ?? null,
            turn_id: c.turn_id ?? null,
            started_at: c.startedAt.toISOString(),
            attributes: {},
            inputs: c.inputs ?? {},
          },
        },
      },
      {
        mode: 'end',
        req: {
          end: {
            project_id: project,
            id: c.id,
            ended_at: new Date(c.startedAt.getTime() + (c.latencyMs ?? 100)).toISOString(),
            exception: c.exception ?? null,
            output: c.output ?? null,
            summary: c.summary ?? {},
          },
        },
      },
    ]);
    const payload = JSON.stringify({ batch }).replaceAll(JSON.stringify(WHOLE_FLOAT_ONE), '1.0');
    const response = await app.inject({ method: 'POST', url: '/traces/call/upsert_batch', headers: { ...user.headers, 'content-type': 'application/json' }, payload });
    if (response.statusCode !== 200) throw new Error(`upsert_batch answered ${response.statusCode}: ${response.body}`);
  }
}

/**
 * A dataset version as `weave.publish(weave.Dataset(name=…, rows=…))` writes it: the rows through
 * /traces/table/create, then an object whose `rows` is that table's ref. `rows` may be JSON text, to hold
 * numbers as a Python client writes them (`1.0`).
 */
export async function publishDataset(app: App, user: TestUser, project: string, name: string, rows: unknown[] | string): Promise<{ digest: string; table: string }> {
  const rowsJson = typeof rows === 'string' ? rows : JSON.stringify(rows);
  const payload = `{"table":{"project_id":${JSON.stringify(project)},"rows":${rowsJson}}}`;
  const table = await app.inject({ method: 'POST', url: '/traces/table/create', headers: { ...user.headers, 'content-type': 'application/json' }, payload });
  if (table.statusCode !== 200) throw new Error(`table/create answered ${table.statusCode}: ${table.body}`);
  const tableDigest = table.json().digest as string;
  const val = { _type: 'Dataset', name, description: null, rows: `weave:///${project}/table/${tableDigest}`, _class_name: 'Dataset', _bases: ['Object', 'BaseModel'] };
  const obj = await app.inject({ method: 'POST', url: '/traces/obj/create', headers: user.headers, payload: { obj: { project_id: project, object_id: name, val } } });
  if (obj.statusCode !== 200) throw new Error(`obj/create answered ${obj.statusCode}: ${obj.body}`);
  return { digest: obj.json().digest, table: tableDigest };
}

/**
 * Usage rows on the days given, straight into usage_records: the gateway records a request at the time
 * it is made, so a test cannot reach other days through it (as the 10,000-step chart's metric rows).
 */
export async function insertUsageRows(app: App, user: TestUser, project: string, rows: { at: string; model: string; prompt: number; completion: number; error?: boolean }[]): Promise<void> {
  const [entity, name] = project.split('/');
  await app.db
    .insertInto('usage_records')
    .values(
      rows.map((r, i) => ({
        created_at: r.at,
        entity,
        project: name,
        api_key_id: user.keyId,
        request_id: `seeded-${randomUUID()}-${i}`,
        model: r.model,
        base_model: r.model,
        trained_model: null,
        checkpoint_step: null,
        backend: 'seeded',
        stream: false,
        prompt_tokens: r.prompt,
        completion_tokens: r.completion,
        cached_tokens: 0,
        estimated: false,
        latency_ms: 10,
        time_to_first_token_ms: null,
        outcome: r.error ? ('error' as const) : ('success' as const),
        status: r.error ? 500 : 200,
        error_code: r.error ? 'engine_error' : null,
      })),
    )
    .execute();
}
