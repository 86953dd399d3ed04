"""It learns: a tiny random causal LM on CPU, a one-word task with a binary reward (1 for "maybe"), rollouts sampled
from the current policy with their log-probabilities, and RL steps through the trainer's real code path (job spec in,
adapter out, the next step continuing from it with its optimizer state)."""
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from helpers import PROMPTS, next_token_logprobs, run_job, write_job
from tiny import token_choice

SAMPLES = 8
MAX_STEPS = 30
MARGIN = 0.5  # the expected reward must rise by at least this much


def expected_reward(policy, tokenizer):
    target = tokenizer.convert_tokens_to_ids("maybe")
    return sum(float(next_token_logprobs(policy, tokenizer, p)[target].exp()) for p in PROMPTS) / len(PROMPTS)


def test_binary_reward_rises_across_rl_steps(tmp_path, capsys, model_dir, tokenizer):
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    policy, adapter = base, None
    initial = expected_reward(policy, tokenizer)
    rewards = [initial]
    for step in range(1, MAX_STEPS + 1):
        groups = []
        for prompt in PROMPTS:
            logprobs = next_token_logprobs(policy, tokenizer, prompt)
            trajectories = []
            for token in torch.multinomial(logprobs.exp(), SAMPLES, replacement=True).tolist():
                word = tokenizer.convert_ids_to_tokens(token)
                choice = token_choice(tokenizer, [word], [float(logprobs[token])])
                trajectories.append({"messages_and_choices": [{"role": "user", "content": prompt}, choice], "reward": float(word == "maybe")})
            groups.append({"trajectories": trajectories})
        spec, adapter_out = write_job(str(tmp_path), "rl", model_dir, groups, base=adapter, step=step, config={"learning_rate": 5e-4})
        code, events, err = run_job(capsys, spec, "--device", "cpu")
        assert code == 0, err
        assert events[-1]["type"] == "checkpoint" and events[-1]["uri"] == adapter_out
        adapter = adapter_out
        policy = PeftModel.from_pretrained(base, adapter) if step == 1 else policy
        if step > 1:
            policy.load_adapter(adapter, adapter_name=f"s{step}")
            policy.set_adapter(f"s{step}")
        rewards.append(expected_reward(policy, tokenizer))
        if rewards[-1] >= initial + MARGIN + 0.1:
            break
    print("expected reward per step:", [round(r, 3) for r in rewards])
    assert rewards[-1] >= initial + MARGIN, rewards
