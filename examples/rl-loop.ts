/**
 * The whole RL loop against a trainyard server, end to end:
 *   register a model → rollouts through the gateway with the `openai` SDK → score them → log them →
 *   create a training job → follow its events → call the new checkpoint by name.
 *
 * Run it against any trainyard that has an engine (BACKENDS_FILE) and a trainer worker:
 *
 *   TRAINYARD_URL=http://127.0.0.1:8000 TRAINYARD_API_KEY=$(cat data/admin-api-key) \
 *   BASE_MODEL=Qwen/Qwen2.5-0.5B-Instruct npx tsx examples/rl-loop.ts
 *
 * test/examples/rl-loop.test.ts runs it against the fake engine with the fixture trainer.
 */
import OpenAI from 'openai';

export interface RlLoopOptions {
  baseUrl: string;
  apiKey: string;
  baseModel: string;
  project?: string;
  name?: string;
  /** Rollouts per scenario: one trajectory group each. */
  groupSize?: number;
  /** Longest wait for the training job, in milliseconds. */
  timeoutMs?: number;
  log?: (message: string) => void;
}

export interface RlLoopResult {
  modelId: string;
  jobId: string;
  step: number;
  /** The model id the new checkpoint is served under, `entity/project/name:stepN`. */
  checkpointModel: string;
  reply: string;
}

interface Scenario {
  question: string;
  answer: string;
}

const SCENARIOS: Scenario[] = [
  { question: 'What is 2 + 2? Answer with a number only.', answer: '4' },
  { question: 'What is the capital of France? One word.', answer: 'Paris' },
  { question: 'How many legs does a spider have? Answer with a number only.', answer: '8' },
];

/** The reward: 1 for an answer that contains the expected one, 0 otherwise. */
function score(reply: string, scenario: Scenario): number {
  return reply.toLowerCase().includes(scenario.answer.toLowerCase()) ? 1 : 0;
}

async function api<T>(options: RlLoopOptions, method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(`${options.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${options.apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${text}`);
  return JSON.parse(text) as T;
}

export async function runRlLoop(options: RlLoopOptions): Promise<RlLoopResult> {
  const log = options.log ?? ((message: string) => console.log(message));
  const project = options.project ?? 'rl-loop';
  const name = options.name ?? 'agent';
  const groupSize = options.groupSize ?? 4;

  // 1. Register the model (or find it again).
  const model = await api<{ id: string; entity: string; name: string }>(options, 'POST', '/v1/preview/models', {
    entity: null,
    project,
    name,
    base_model: options.baseModel,
    return_existing: true,
  });
  const modelName = `${model.entity}/${project}/${model.name}`;
  log(`model ${modelName} (${model.id})`);

  // 2. Rollouts through the gateway. A model with no checkpoint yet is served by its base model, and
  //    the gateway returns token ids in logprobs because the model is trainable.
  const openai = new OpenAI({ baseURL: `${options.baseUrl}/v1`, apiKey: options.apiKey, project: `${model.entity}/${project}` });
  const groups = [];
  for (const scenario of SCENARIOS) {
    const trajectories = [];
    for (let i = 0; i < groupSize; i++) {
      const messages = [
        { role: 'system' as const, content: 'You answer briefly.' },
        { role: 'user' as const, content: scenario.question },
      ];
      const completion = await openai.chat.completions.create({ model: modelName, messages, temperature: 1, max_completion_tokens: 32 });
      const choice = completion.choices[0];
      // 3. Score.
      trajectories.push({ messages_and_choices: [...messages, choice], reward: score(choice.message.content ?? '', scenario) });
    }
    groups.push({ trajectories });
  }
  log(`${groups.length} groups of ${groupSize} rollouts`);

  // 4. Log them (metrics land on the model's current step).
  const logged = await api<{ step: number; metrics: Record<string, number> }>(options, 'POST', `/v1/preview/models/${model.id}/log`, {
    split: 'train',
    trajectory_groups: groups,
  });
  log(`logged at step ${logged.step}: train/reward ${logged.metrics['train/reward']}`);

  // 5. Ask for a training step.
  const job = await api<{ id: string }>(options, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: groups });
  log(`training job ${job.id}`);

  // 6. Follow its events, as ART does: page after the last event seen until training ends.
  const deadline = Date.now() + (options.timeoutMs ?? 600_000);
  let after = '';
  for (let ended = false; !ended; ) {
    if (Date.now() > deadline) throw new Error(`training job ${job.id} did not finish in time`);
    const page = await api<{ data: { id: string; type: string; data: Record<string, unknown> }[] }>(
      options,
      'GET',
      `/v1/preview/training-jobs/${job.id}/events?limit=20${after ? `&after=${after}` : ''}`,
    );
    for (const event of page.data) {
      after = event.id;
      log(`  ${event.type} ${JSON.stringify(event.data)}`);
      if (event.type === 'training_failed') throw new Error(`training failed: ${String(event.data.error_message)}`);
      if (event.type === 'training_ended') ended = true;
    }
    if (!ended && page.data.length === 0) await new Promise((resolve) => setTimeout(resolve, 250));
  }

  // 7. The new checkpoint is listed by the time training_ended is seen; call it by name.
  const latest = await api<{ data: { step: number }[] }>(options, 'GET', `/v1/preview/models/${model.id}/checkpoints?limit=1&order=desc`);
  const step = latest.data[0]?.step ?? 0;
  const checkpointModel = `${modelName}:step${step}`;
  const completion = await openai.chat.completions.create({
    model: checkpointModel,
    messages: [{ role: 'user', content: SCENARIOS[0].question }],
    max_completion_tokens: 32,
  });
  const reply = completion.choices[0].message.content ?? '';
  log(`${checkpointModel} says: ${reply}`);
  return { modelId: model.id, jobId: job.id, step, checkpointModel, reply };
}

// Run directly: settings come from the environment (this example is its own program).
if (import.meta.url === `file://${process.argv[1]}`) {
  const baseUrl = process.env.TRAINYARD_URL ?? 'http://127.0.0.1:8000';
  const apiKey = process.env.TRAINYARD_API_KEY;
  const baseModel = process.env.BASE_MODEL;
  if (!apiKey || !baseModel) {
    console.error('Set TRAINYARD_API_KEY and BASE_MODEL (and TRAINYARD_URL if not http://127.0.0.1:8000).');
    process.exit(2);
  }
  runRlLoop({ baseUrl, apiKey, baseModel }).catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
