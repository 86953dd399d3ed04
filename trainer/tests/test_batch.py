"""Group advantages, weights, normalisations and the packing plan (art-trainer.md §1.3-1.5, test_grpo_zero_variance)."""
import random

import pytest

from tiny import token_choice
from trainyard_trainer.batch import group_advantages, normalise, pack, tokenize_groups
from trainyard_trainer.config import ConfigError, KEYS, parse_rl_config


def test_advantages_use_the_population_sigma_and_drop_zero_variance_groups():
    a = 0.5 / (0.5 + 1e-6)
    assert group_advantages([1.0, 0.0, 0.0, 1.0], True) == pytest.approx([a, -a, -a, a])
    assert group_advantages([3.0, 1.0], False) == [1.0, -1.0]
    assert group_advantages([0.1, 0.1 + 5e-13], True) is None
    assert group_advantages([0.0, 2e-12], True) is not None
    assert group_advantages([7e199, -7e199], True) == pytest.approx([1.0, -1.0])
    assert group_advantages([1.0], True) is None


def group(tokenizer, rewards, words=None):
    words = words or ["maybe"] * len(rewards)
    return {"trajectories": [{"messages_and_choices": [{"role": "user", "content": "say one word"}, token_choice(tokenizer, w.split())], "reward": r}
                             for w, r in zip(words, rewards)]}


def test_zero_advantage_trajectories_and_zero_variance_groups_produce_nothing(tokenizer):
    config = parse_rl_config({})
    groups, stats = tokenize_groups(tokenizer, [group(tokenizer, [1, 1, 1]), group(tokenizer, [0, 1, 0.5])], config, random.Random(0))
    assert stats.num_groups == 2 and stats.num_groups_trainable == 1
    assert len(groups) == 1 and len(groups[0]) == 2  # the reward equal to the mean is skipped


def test_weights_and_advantages_are_normalised_over_the_batch(tokenizer):
    config = parse_rl_config({"scale_rewards": False})
    # Trajectories of 1 and 3 sampled tokens; advantages ±1 and ±2 in two groups.
    groups, _ = tokenize_groups(tokenizer, [group(tokenizer, [1, 0], ["yes", "no no no"]), group(tokenizer, [4, 0], ["yes", "no"])], config, random.Random(0))
    rows, _ = pack(groups, 2048, random.Random(0))
    normalise(rows, 0.0)
    results = [r for row in rows for r in row]
    n_total, t = sum(r.num_trainable for r in results), len(results)
    for r in results:
        assert r.weight == pytest.approx(n_total / (t * r.num_trainable), rel=1e-5)  # w = N / (T·n_τ)
    mean_abs = sum(abs(r.advantage) * r.weight * r.num_trainable for r in results) / n_total
    assert mean_abs == pytest.approx(1.0)
    # With β = 0 this is A_τ / mean_τ |A_τ|: raw ±0.5 and ±2 → mean 1.25.
    assert sorted(round(r.advantage, 6) for r in results) == [-1.6, -0.4, 0.4, 1.6]


def test_advantage_balance_down_weights_non_positive_advantages(tokenizer):
    config = parse_rl_config({"scale_rewards": False, "advantage_balance": 0.5})
    groups, _ = tokenize_groups(tokenizer, [group(tokenizer, [1, 0])], config, random.Random(0))
    rows, _ = pack(groups, 2048, random.Random(0))
    normalise(rows, 0.5)
    by_sign = sorted(r.advantage for row in rows for r in row)
    assert by_sign[1] == pytest.approx(-2 * by_sign[0])


def test_packing_shares_the_prompt_and_drops_results_longer_than_a_row(tokenizer):
    config = parse_rl_config({})
    groups, _ = tokenize_groups(tokenizer, [group(tokenizer, [1, 0, 1, 0])], config, random.Random(0))
    length = len(groups[0][0].token_ids)
    prompt = groups[0][0].prompt_length
    assert prompt == length - 2  # shared up to one token before the first sampled one
    rows, dropped = pack(groups, length + 2 * (length - prompt), random.Random(0))
    assert [len(row) for row in rows] == [3, 1] or [len(row) for row in rows] == [1, 3]
    assert dropped == 0
    rows, dropped = pack(groups, length - 1, random.Random(0))
    assert rows == [] and dropped == 4


def test_every_experimental_config_key_is_known_and_unknown_or_bad_ones_are_refused_by_name():
    assert len(KEYS) == 25
    parse_rl_config({key: None for key in KEYS})  # every key present as null: all defaults
    with pytest.raises(ConfigError, match="experimental_config.fixture_mode is not a key this trainer knows"):
        parse_rl_config({"fixture_mode": "ok"})
    with pytest.raises(ConfigError, match="experimental_config.loss_fn must be one of cispo, ppo, got 'grpo'"):
        parse_rl_config({"loss_fn": "grpo"})
    with pytest.raises(ConfigError, match="experimental_config.ppo=True conflicts with loss_fn='cispo'"):
        parse_rl_config({"ppo": True, "loss_fn": "cispo"})
    with pytest.raises(ConfigError, match="kl_penalty_step_lag and kl_penalty_reference_step are exclusive"):
        parse_rl_config({"kl_penalty_step_lag": 1, "kl_penalty_reference_step": 0})
    with pytest.raises(ConfigError, match="experimental_config.importance_sampling_level must be one of"):
        parse_rl_config({"importance_sampling_level": "tok"})
    assert parse_rl_config({"scale_rewards": True, "normalize_advantages": False}).scale_rewards is False
