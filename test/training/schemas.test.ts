import { describe, expect, it } from 'vitest';
import { zodIssuesToDetail } from '../../src/http/validation.js';
import { checkWorkerEvents } from '../../src/training/protocol.js';
import {
  CheckpointListQuery,
  CreateSFTTrainingJob,
  CreateTrainingJob,
  DeleteCheckpointsRequest,
  ExperimentalTrainingConfig,
  LogRequest,
  ModelCreate,
  PostEventsRequest,
  TrajectoryGroup,
} from '../../src/training/schemas.js';

const choice = {
  finish_reason: 'stop',
  index: 0,
  logprobs: { content: [{ token: 'token_id:42', bytes: [104], logprob: -0.1, top_logprobs: [] }], refusal: null },
  message: { role: 'assistant', content: 'hi', refusal: null, annotations: null, audio: null, function_call: null, tool_calls: null },
  stop_reason: null,
  token_ids: [42],
  prompt_token_ids: [1, 2, 3],
};

/** Generation A: reward and messages_and_choices required, plus auto_metrics. */
const generationA = {
  trajectories: [{ messages_and_choices: [{ role: 'user', content: 'hello' }, choice], reward: 1, auto_metrics: { tokens: 3 } }],
};

/** Generation B: every trajectory field, group extras the server used to ignore. */
const generationB = {
  trajectories: [
    {
      messages_and_choices: [{ role: 'system', content: [{ type: 'text', text: 'be brief' }] }, choice],
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
      additional_histories: [{ messages_and_choices: [choice], tools: null }],
      reward: 0.5,
      initial_policy_version: 0,
      final_policy_version: null,
      metrics: { correct: true, turns: 2 },
      metadata: { scenario_id: 'a', note: null },
      logs: ['ok'],
    },
  ],
  exceptions: [{ type: "<class 'ValueError'>", message: 'bad', traceback: 'Traceback ...' }],
  metadata: { scenario_id: 'a' },
  metrics: { diversity: 0.1 },
  logs: ['group log'],
};

/** Generation C: defaults omitted (no reward, no messages), exchanges instead of messages. */
const generationC = {
  trajectories: [
    { exchanges: { chat_completions: [{ request: { model: 'm', messages: [] }, response: { choices: [] }, start_time: 1, end_time: 2, model: 'm' }] } },
    { metrics: { solved: false } },
  ],
};

describe('TrajectoryGroup', () => {
  it('accepts the group shapes of all three client generations', () => {
    for (const group of [generationA, generationB, generationC, {}]) {
      expect(TrajectoryGroup.safeParse(group).success).toBe(true);
    }
  });

  it('defaults an absent reward to 0', () => {
    expect(TrajectoryGroup.parse(generationC).trajectories?.[1].reward).toBe(0);
  });

  it('keeps engine keys on Choice objects and unknown keys on trajectories and groups', () => {
    const parsed = TrajectoryGroup.parse({ ...generationB, future_field: 1, trajectories: [{ ...generationB.trajectories[0], new_key: 'x' }] });
    expect(parsed).toHaveProperty('future_field', 1);
    expect(parsed.trajectories?.[0]).toHaveProperty('new_key', 'x');
    expect(parsed.trajectories?.[0].messages_and_choices?.[1]).toEqual(choice);
  });

  it('rejects an item of messages_and_choices that is neither a message nor a choice', () => {
    expect(TrajectoryGroup.safeParse({ trajectories: [{ messages_and_choices: [{ content: 'no role' }] }] }).success).toBe(false);
  });

  it('rejects a non-numeric reward with its location', () => {
    const result = LogRequest.safeParse({ split: 'val', trajectory_groups: [{ trajectories: [{ reward: 'high' }] }] });
    expect(result.success).toBe(false);
    const detail = zodIssuesToDetail(result.error!.issues, 'body', {});
    expect(detail[0].loc).toEqual(['body', 'trajectory_groups', 0, 'trajectories', 0, 'reward']);
  });
});

describe('ExperimentalTrainingConfig', () => {
  const keys = [
    'advantage_balance', 'allow_training_without_logprobs', 'epsilon', 'epsilon_high', 'importance_sampling_level',
    'kimi_k2_tau', 'kl_penalty_coef', 'kl_penalty_reference_step', 'kl_penalty_source', 'kl_penalty_step_lag',
    'kl_ref_adapter_path', 'learning_rate', 'logprob_calculation_chunk_size', 'loss_fn', 'mask_prob_ratio',
    'max_negative_advantage_importance_sampling_weight', 'normalize_advantages',
    'num_trajectories_learning_rate_multiplier_power', 'packed_sequence_length', 'plot_tensors', 'ppo',
    'precalculate_logprobs', 'scale_learning_rate_by_reward_std_dev', 'scale_rewards', 'truncated_importance_sampling',
  ];

  it('declares the 25 keys of generation B', () => {
    expect(Object.keys(ExperimentalTrainingConfig.shape).sort()).toEqual([...keys].sort());
  });

  it('accepts all 25 keys as null and keeps unknown keys for the trainer', () => {
    const parsed = ExperimentalTrainingConfig.parse({ ...Object.fromEntries(keys.map((k) => [k, null])), tinker_loss_fn: 'dro' });
    expect(parsed.loss_fn).toBeNull();
    expect(parsed).toHaveProperty('tinker_loss_fn', 'dro');
  });

  it('accepts what the latest ART backend sends by default', () => {
    const body = { model_id: crypto.randomUUID(), trajectory_groups: [generationB], experimental_config: { advantage_balance: 0, importance_sampling_level: 'token', kl_penalty_coef: 0, kl_penalty_source: 'current_learner', learning_rate: 5e-6, loss_fn: 'cispo', mask_prob_ratio: false, normalize_advantages: true, ppo: false, precalculate_logprobs: false, scale_rewards: true } };
    expect(CreateTrainingJob.safeParse(body).success).toBe(true);
  });
});

describe('CreateSFTTrainingJob', () => {
  const model_id = crypto.randomUUID();

  it('takes training_folder_url as an alias of training_data_url', () => {
    const parsed = CreateSFTTrainingJob.parse({ model_id, training_folder_url: 'weave:///e/p/object/data:abc' });
    expect(parsed.training_data_url).toBe('weave:///e/p/object/data:abc');
    expect(parsed).not.toHaveProperty('training_folder_url');
  });

  it('reports a missing training_data_url as a missing field', () => {
    const result = CreateSFTTrainingJob.safeParse({ model_id });
    const detail = zodIssuesToDetail(result.error!.issues, 'body', { model_id });
    expect(detail).toEqual([expect.objectContaining({ type: 'missing', loc: ['body', 'training_data_url'] })]);
  });

  it('accepts batch_size auto, a learning rate per batch, assistant_turns and metric_logging', () => {
    const config = { batch_size: 'auto', learning_rate: [1e-5, 5e-6], assistant_turns: 'last', metric_logging: { enabled: true, target_training_step: 3 } };
    expect(CreateSFTTrainingJob.safeParse({ model_id, training_data_url: 'x', config }).success).toBe(true);
    expect(CreateSFTTrainingJob.safeParse({ model_id, training_data_url: 'x', config: { batch_size: 2, learning_rate: 5e-5 } }).success).toBe(true);
  });

  it('rejects an assistant_turns other than all or last', () => {
    expect(CreateSFTTrainingJob.safeParse({ model_id, training_data_url: 'x', config: { assistant_turns: 'first' } }).success).toBe(false);
  });
});

describe('request defaults', () => {
  it('reads checkpoint query strings with limit 20 and order asc by default', () => {
    expect(CheckpointListQuery.parse({})).toEqual({ limit: 20, order: 'asc' });
    expect(CheckpointListQuery.parse({ limit: '1', order: 'desc' })).toEqual({ limit: 1, order: 'desc' });
  });

  it('refuses a page limit outside 1 to 100', () => {
    expect(CheckpointListQuery.safeParse({ limit: '0' }).success).toBe(false);
    expect(CheckpointListQuery.safeParse({ limit: '101' }).success).toBe(false);
  });

  it('resolves return_existing to false and accepts a null entity', () => {
    expect(ModelCreate.parse({ entity: null, project: 'p', name: 'n', base_model: 'b' }).return_existing).toBe(false);
  });

  it('requires integer steps when deleting checkpoints', () => {
    expect(DeleteCheckpointsRequest.safeParse({ steps: [1, 2.5] }).success).toBe(false);
  });
});

describe('worker events', () => {
  const lease_token = crypto.randomUUID();

  it('accepts gradient_step data of numbers only', () => {
    const body = { lease_token, events: [{ type: 'training_started', data: { num_sequences: 2 } }, { type: 'gradient_step', data: { loss: 0.3, grad_norm: 1 } }] };
    expect(PostEventsRequest.safeParse(body).success).toBe(true);
  });

  it('rejects gradient_step data that is a string, null or nested', () => {
    for (const data of [{ loss: '0.3' }, { loss: null }, { loss: { value: 1 } }]) {
      expect(PostEventsRequest.safeParse({ lease_token, events: [{ type: 'gradient_step', data }] }).success).toBe(false);
    }
  });

  it('rejects training_started without num_sequences, and terminal events a worker may not post', () => {
    expect(PostEventsRequest.safeParse({ lease_token, events: [{ type: 'training_started', data: {} }] }).success).toBe(false);
    expect(PostEventsRequest.safeParse({ lease_token, events: [{ type: 'training_ended', data: {} }] }).success).toBe(false);
  });

  it('requires training_started before any gradient_step of an attempt', () => {
    expect(checkWorkerEvents([{ type: 'gradient_step', data: { loss: 1 } }], false)).toEqual({ index: 0, message: 'gradient_step must come after training_started' });
    expect(checkWorkerEvents([{ type: 'gradient_step', data: { loss: 1 } }], true)).toBeNull();
  });

  it('refuses a second training_started in one attempt', () => {
    const started = { type: 'training_started' as const, data: { num_sequences: 1 } };
    expect(checkWorkerEvents([started, started], false)?.index).toBe(1);
    expect(checkWorkerEvents([started], true)?.index).toBe(0);
  });
});
