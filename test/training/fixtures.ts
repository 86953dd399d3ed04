import type { App } from '../../src/app.js';
import { createUserWithKey, createWorkerKey, uniqueName, type TestUser } from '../helpers/app.js';

/** Factories and a scripted trainer worker for the training API's HTTP tests. */

export interface Reply<T = any> {
  status: number;
  body: T;
  text: string;
}

/** Calls the app as `headers` (a user or worker key), JSON in and out. */
export async function call<T = any>(
  app: App,
  headers: Record<string, string>,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  url: string,
  body?: unknown,
): Promise<Reply<T>> {
  const response = await app.inject({
    method,
    url,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
  let parsed: unknown = undefined;
  try {
    parsed = response.body === '' ? undefined : response.json();
  } catch {
    parsed = undefined;
  }
  return { status: response.statusCode, body: parsed as T, text: response.body };
}

/** The latest ART client sends all 25 keys of ExperimentalTrainingConfig, unset ones as null (reference §3.6). */
export const EXPERIMENTAL_CONFIG_25_NULLS: Record<string, null> = Object.fromEntries(
  [
    'advantage_balance',
    'allow_training_without_logprobs',
    'epsilon',
    'epsilon_high',
    'importance_sampling_level',
    'kimi_k2_tau',
    'kl_penalty_coef',
    'kl_penalty_reference_step',
    'kl_penalty_source',
    'kl_penalty_step_lag',
    'kl_ref_adapter_path',
    'learning_rate',
    'logprob_calculation_chunk_size',
    'loss_fn',
    'mask_prob_ratio',
    'max_negative_advantage_importance_sampling_weight',
    'normalize_advantages',
    'num_trajectories_learning_rate_multiplier_power',
    'packed_sequence_length',
    'plot_tensors',
    'ppo',
    'precalculate_logprobs',
    'scale_learning_rate_by_reward_std_dev',
    'scale_rewards',
    'truncated_importance_sampling',
  ].map((key) => [key, null]),
);

/** A dumped OpenAI Choice with vLLM's extra keys and `token_id:N` logprobs, as ART sends it. */
export function choice(content: string, tokens = 4): Record<string, unknown> {
  return {
    finish_reason: 'stop',
    index: 0,
    logprobs: {
      content: Array.from({ length: tokens }, (_, i) => ({
        token: `token_id:${1000 + i}`,
        bytes: [104, 105],
        logprob: -0.01 * (i + 1),
        top_logprobs: [],
      })),
      refusal: null,
    },
    message: { role: 'assistant', content, refusal: null, annotations: null, audio: null, function_call: null, tool_calls: null },
    stop_reason: null,
    token_ids: [1000, 1001, 1002, 1003],
    prompt_token_ids: [1, 2, 3],
  };
}

/** Generation A: everything present, `auto_metrics`, python-mode dump. */
export function groupGenerationA(rewards: number[] = [1, 0]): Record<string, unknown> {
  return {
    trajectories: rewards.map((reward) => ({
      messages_and_choices: [{ role: 'system', content: 'play 2048' }, { role: 'user', content: 'board' }, choice('left')],
      reward,
      metrics: { moves: 3 },
      auto_metrics: {},
      metadata: {},
      logs: [],
      tools: null,
      additional_histories: [],
      initial_policy_version: null,
      final_policy_version: null,
    })),
  };
}

/** Generation B: defaults omitted (no `reward` when 0), booleans in metrics, group extras, histories. */
export function groupGenerationB(): Record<string, unknown> {
  return {
    trajectories: [
      {
        messages_and_choices: [{ role: 'user', content: 'hi' }, choice('hello')],
        reward: 0.5,
        metrics: { won: true, duration: 1.25 },
        metadata: { scenario_id: 's1' },
        additional_histories: [{ messages_and_choices: [{ role: 'user', content: 'sub' }, choice('task')], tools: null }],
        tools: [{ type: 'function', function: { name: 'move', description: 'Moves', parameters: { type: 'object' }, strict: false } }],
        an_unknown_key: { kept: true },
      },
      { messages_and_choices: [{ role: 'user', content: 'hi' }, choice('bye')], metrics: { won: false } },
    ],
    exceptions: [{ type: "<class 'TimeoutError'>", message: 'rollout timed out', traceback: 'Traceback ...' }],
    metadata: { scenario_id: 's1' },
    metrics: { difficulty: 2 },
    logs: ['group log line'],
  };
}

/** Generation C: `exchanges` instead of messages_and_choices. */
export function groupGenerationC(): Record<string, unknown> {
  return {
    trajectories: [
      {
        exchanges: {
          chat_completions: [
            {
              request: { model: 'm', messages: [{ role: 'user', content: 'x' }] },
              response: { id: 'c1', object: 'chat.completion', choices: [choice('y')] },
              start_time: '2026-01-01T00:00:00Z',
              end_time: '2026-01-01T00:00:01Z',
              model: 'm',
            },
          ],
        },
        reward: 1,
      },
      { exchanges: { chat_completions: [] } },
    ],
  };
}

export const THREE_GENERATIONS = () => [groupGenerationA(), groupGenerationB(), groupGenerationC()];

/** The 409 body of every worker call whose lease token is not the job's current lease. */
export const staleBody = (jobId: string) => ({
  detail: `The lease token is not the current lease of training job ${jobId}: the lease expired, the job was requeued or reclaimed, or it already ended. Stop working on this job.`,
});

export interface ClaimedJob {
  job: {
    id: string;
    kind: 'rl' | 'sft';
    attempt: number;
    model: { id: string; entity: string; project: string; name: string; base_model: string };
    base_checkpoint: { id: string; step: number; uri: string } | null;
    kl_reference_checkpoint?: { id: string; step: number; uri: string } | null;
    target_step: number;
    config: Record<string, any>;
    num_inputs: number;
    inputs_url: string;
  };
  lease: { token: string; expires_at: string };
}

/**
 * A trainer worker driven step by step, as a real one would: claim, read inputs, post events, complete.
 * It claims only jobs of its own base models, so tests that share an app never take each other's jobs.
 */
export class ScriptedWorker {
  constructor(
    private readonly app: App,
    readonly headers: Record<string, string>,
    readonly baseModels: string[],
    readonly workerId = uniqueName('worker'),
  ) {}

  static async create(app: App, owner: TestUser, baseModels: string[]): Promise<ScriptedWorker> {
    return new ScriptedWorker(app, (await createWorkerKey(app, owner.username)).headers, baseModels);
  }

  call<T = any>(method: 'GET' | 'POST', url: string, body?: unknown): Promise<Reply<T>> {
    return call<T>(this.app, this.headers, method, url, body);
  }

  async claim(waitSeconds = 0, extra: Record<string, unknown> = {}): Promise<ClaimedJob | undefined> {
    const reply = await this.call<ClaimedJob>('POST', '/v1/workers/claim', {
      worker_id: this.workerId,
      base_models: this.baseModels,
      wait_seconds: waitSeconds,
      ...extra,
    });
    if (reply.status === 204) return undefined;
    if (reply.status !== 200) throw new Error(`claim answered ${reply.status}: ${reply.text}`);
    return reply.body;
  }

  async inputs(claimed: ClaimedJob): Promise<unknown[]> {
    const response = await this.app.inject({ method: 'GET', url: claimed.job.inputs_url, headers: this.headers });
    if (response.statusCode !== 200) throw new Error(`inputs answered ${response.statusCode}: ${response.body}`);
    return response.body.split('\n').filter(Boolean).map((line) => JSON.parse(line));
  }

  events(claimed: ClaimedJob, events: { type: string; data: Record<string, unknown> }[]): Promise<Reply> {
    return this.call('POST', `/v1/workers/jobs/${claimed.job.id}/events`, { lease_token: claimed.lease.token, events });
  }

  heartbeat(claimed: ClaimedJob): Promise<Reply> {
    return this.call('POST', `/v1/workers/jobs/${claimed.job.id}/heartbeat`, { lease_token: claimed.lease.token });
  }

  /** Completes with `uri`, by default `s3://checkpoints/<model name>/<target step>`. */
  complete(claimed: ClaimedJob, metrics: Record<string, number> = {}, uri = `s3://checkpoints/${claimed.job.model.name}/${claimed.job.target_step}`): Promise<Reply> {
    return this.call('POST', `/v1/workers/jobs/${claimed.job.id}/complete`, { lease_token: claimed.lease.token, checkpoint: { uri, metrics } });
  }

  fail(claimed: ClaimedJob, errorMessage: string, retryable: boolean): Promise<Reply> {
    return this.call('POST', `/v1/workers/jobs/${claimed.job.id}/fail`, { lease_token: claimed.lease.token, error_message: errorMessage, retryable });
  }

  /**
   * One whole attempt: claim (waiting), read the inputs, `training_started`, `gradientSteps` gradient steps
   * with a pause between them (so a polling client sees them arrive), heartbeat, complete.
   */
  async train(options: { gradientSteps: number; pauseMs?: number; waitSeconds?: number }): Promise<{ claimed: ClaimedJob; inputs: unknown[] }> {
    const claimed = await this.claim(options.waitSeconds ?? 10);
    if (!claimed) throw new Error('no job to claim');
    const inputs = await this.inputs(claimed);
    const expectOk = (reply: Reply, what: string) => {
      if (reply.status !== 200) throw new Error(`${what} answered ${reply.status}: ${reply.text}`);
    };
    expectOk(await this.events(claimed, [{ type: 'training_started', data: { num_sequences: options.gradientSteps } }]), 'training_started');
    for (let step = 1; step <= options.gradientSteps; step++) {
      await new Promise((resolve) => setTimeout(resolve, options.pauseMs ?? 0));
      expectOk(
        await this.events(claimed, [{ type: 'gradient_step', data: { loss: 1 / step, grad_norm: 0.5, learning_rate: 5e-6, gradient_step: step } }]),
        'gradient_step',
      );
      expectOk(await this.heartbeat(claimed), 'heartbeat');
    }
    expectOk(await this.complete(claimed, { 'loss/train': 0.25 }), 'complete');
    return { claimed, inputs };
  }
}

/** A user with a model of a fresh base model (so that a worker can claim exactly its jobs). */
export async function userWithModel(app: App, user?: TestUser): Promise<{ user: TestUser; model: any; baseModel: string }> {
  const owner = user ?? (await createUserWithKey(app));
  const baseModel = uniqueName('Qwen/Qwen3-14B');
  const reply = await call(app, owner.headers, 'POST', '/v1/preview/models', {
    entity: null,
    project: 'proj',
    name: uniqueName('agent'),
    base_model: baseModel,
    return_existing: true,
  });
  if (reply.status !== 200) throw new Error(`create model answered ${reply.status}: ${reply.text}`);
  return { user: owner, model: reply.body, baseModel };
}

/** A user's model with a worker serving its base model, and the model's path under the training API. */
export interface ModelWithWorker {
  user: TestUser;
  model: { id: string; name: string };
  worker: ScriptedWorker;
  base: string;
}

export async function modelWithWorker(app: App): Promise<ModelWithWorker> {
  const { user, model, baseModel } = await userWithModel(app);
  return { user, model, worker: await ScriptedWorker.create(app, user, [baseModel]), base: `/v1/preview/models/${model.id}` };
}

/** The steps of the model's checkpoints, as Get Model Checkpoints lists them. */
export async function checkpointSteps(app: App, t: ModelWithWorker): Promise<number[]> {
  const page = await call(app, t.user.headers, 'GET', `${t.base}/checkpoints?limit=100`);
  if (page.status !== 200) throw new Error(`list checkpoints answered ${page.status}: ${page.text}`);
  return page.body.data.map((c: { step: number }) => c.step);
}

/** ART's `train.jsonl` lines: `{messages, tools?}`, Choices flattened to assistant messages (reference §3.7). */
export function sftRows(count: number): Record<string, unknown>[] {
  return Array.from({ length: count }, (_, i) => ({
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: `question ${i}` },
      { role: 'assistant', content: `answer ${i}` },
    ],
    ...(i % 2 === 0 ? { tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }] } : {}),
  }));
}

/**
 * Stores training data the way the tracing API does (its /table/create, /obj/create and /file/create are
 * served by these services) and answers the refs an SFT job can name.
 */
export async function storeDataset(
  app: App,
  owner: TestUser,
  rows: Record<string, unknown>[],
  project = 'datasets',
): Promise<{ tableRef: string; datasetRef: string; fileRef: string }> {
  const { createTable } = await import('../../src/tracing/services/tables.js');
  const { createObject } = await import('../../src/tracing/services/objects.js');
  const { createFile } = await import('../../src/tracing/services/files.js');
  const { parseLossless } = await import('../../src/tracing/json.js');
  const deps = { db: app.db, kind: app.database.kind };
  const projectId = `${owner.entity}/${project}`;
  const table = await createTable(deps, { projectId, rows: rows.map((row) => parseLossless(JSON.stringify(row))) });
  const tableRef = `weave:///${projectId}/table/${table.digest}`;
  const name = uniqueName('sft-data');
  const dataset = await createObject(deps, {
    projectId,
    objectId: name,
    val: parseLossless(JSON.stringify({ _type: 'Dataset', _class_name: 'Dataset', _bases: ['Object', 'BaseModel'], name, rows: tableRef })),
    userId: owner.username,
  });
  const file = await createFile(deps, {
    projectId,
    name: 'train.jsonl',
    content: Buffer.from(rows.map((row) => JSON.stringify(row)).join('\n') + '\n'),
  });
  return { tableRef, datasetRef: `weave:///${projectId}/object/${name}:${dataset.digest}`, fileRef: `weave:///${projectId}/file/${file.digest}` };
}
