"""The loss against ART's published figures (art-trainer.md §1.7 and §6: test_loss_ratio, test_loss_tis,
test_loss_offpolicy_diagnostics)."""
import math

import pytest
import torch

from trainyard_trainer import loss as loss_module
from trainyard_trainer.config import parse_rl_config
from trainyard_trainer.loss import rl_loss

PPO = parse_rl_config({"loss_fn": "ppo"})
CISPO = parse_rl_config({})
LEVELS = ("token", "sequence", "average", "geometric_average")


def run(config, new, old, adv, mask=None, weights=None, **kwargs):
    new = torch.tensor(new, dtype=torch.float32, requires_grad=True)
    n = new.shape[0]
    mask = torch.tensor(mask if mask is not None else [1.0] * n)
    weights = torch.tensor(weights if weights is not None else [1.0] * n)
    terms = rl_loss(new, torch.tensor(old, dtype=torch.float32), mask, torch.tensor(adv, dtype=torch.float32), weights, config, **kwargs)
    loss = terms.loss
    loss.backward()
    return float(loss.detach()), new.grad.tolist(), terms


def test_defaults_cispo_clips_to_0_and_5_and_ppo_to_0_8_and_1_2():
    assert (CISPO.loss_fn, CISPO.epsilon, CISPO.epsilon_high) == ("cispo", 1.0, 4.0)
    assert (PPO.loss_fn, PPO.epsilon, PPO.epsilon_high) == ("ppo", 0.2, 0.2)
    # A null epsilon_high is absent: the loss default applies, not epsilon.
    assert parse_rl_config({"epsilon_high": None}).epsilon_high == 4.0
    assert parse_rl_config({"ppo": True, "epsilon": 0.3}).epsilon_high == 0.3


def test_ppo_matches_the_hand_formula_token_mean():
    new, old, adv = [-1.0, -0.5, -2.0, -0.1], [-1.2, -0.1, -1.0, -0.1], [1.0, -1.0, 0.5, 2.0]
    loss, _, _ = run(PPO, new, old, adv)
    expected = []
    for n, o, a in zip(new, old, adv):
        rho = math.exp(n - o)
        expected.append(-min(rho * a, min(max(rho, 0.8), 1.2) * a))
    assert loss == pytest.approx(sum(expected) / 4, rel=1e-6)


def test_cispo_matches_the_hand_formula_with_a_detached_clipped_ratio():
    new, old, adv = [-1.0, -0.5, -2.0, -0.1], [-3.0, -0.1, -1.0, -0.1], [1.0, -1.0, 0.5, 2.0]
    loss, grad, _ = run(CISPO, new, old, adv)
    clip = [min(max(math.exp(n - o), 0.0), 5.0) for n, o in zip(new, old)]
    assert loss == pytest.approx(sum(-c * a * n for c, a, n in zip(clip, adv, new)) / 4, rel=1e-6)
    # REINFORCE with a clipped, detached weight: d/dℓ = -clip·A / n.
    assert grad == pytest.approx([-c * a / 4 for c, a in zip(clip, adv)], rel=1e-6)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_extreme_and_nan_old_logprobs_give_finite_loss_and_gradients(level, dtype):
    config = parse_rl_config({"loss_fn": "ppo", "importance_sampling_level": level})
    old = torch.tensor([-math.inf, -9999.0, -101.0, math.inf, math.nan])
    for adv in (1.0, -1.0):
        new = torch.full((5,), -1.0, dtype=dtype, requires_grad=True)
        terms = rl_loss(new, old, torch.ones(5), torch.full((5,), adv), torch.ones(5), config)
        terms.loss.backward()
        assert math.isfinite(float(terms.loss.detach()))
        assert torch.isfinite(new.grad.float()).all()


@pytest.mark.parametrize("config", [PPO, CISPO])
def test_masked_positions_with_extreme_or_nan_values_do_not_affect_the_active_tokens(config):
    # One active token on-policy (ratio 1) with A = -1 and ℓ = -1: loss 1.0, gradient [1, 0, 0] (PPO).
    loss, grad, _ = run(config, [-1.0, math.nan, -5.0], [-1.0, -math.inf, math.nan], [-1.0, math.nan, 1e30], mask=[1.0, 0.0, 0.0],
                        weights=[1.0, math.nan, math.inf])
    if config is PPO:
        assert loss == pytest.approx(1.0)
        assert grad == pytest.approx([1.0, 0.0, 0.0])
    else:
        assert loss == pytest.approx(-1.0)  # -1 · (-1) · (-1)
        assert grad == pytest.approx([1.0, 0.0, 0.0])


def test_sequence_ratio_aggregates_before_clipping():
    # old (-32, -1), new (-2, -11): δ = (30, -10), sequence log-ratio 10, loss e^10 with A = -1, gradient split equally.
    config = parse_rl_config({"loss_fn": "ppo", "importance_sampling_level": "sequence"})
    loss, grad, _ = run(config, [-2.0, -11.0], [-32.0, -1.0], [-1.0, -1.0])
    assert loss == pytest.approx(math.exp(10), rel=1e-5)
    assert grad[0] == pytest.approx(grad[1], rel=1e-6)
    assert grad[0] == pytest.approx(math.exp(10) / 2, rel=1e-5)


def test_a_sequence_with_both_infinities_gives_a_finite_loss_of_one():
    config = parse_rl_config({"loss_fn": "ppo", "importance_sampling_level": "sequence"})
    loss, grad, _ = run(config, [-1.0, -1.0], [math.inf, -math.inf], [-1.0, -1.0])
    assert loss == pytest.approx(1.0)
    assert all(math.isfinite(g) for g in grad)


def test_truncated_importance_sampling_uses_the_rollout_logprobs():
    # old -2, orig [-3, NaN, -2], new -1, cap 2: factors [min(e, 2), e^-1, 1].
    config = parse_rl_config({"truncated_importance_sampling": 2.0, "epsilon": 10.0, "epsilon_high": 10.0})
    new = torch.full((3,), -1.0, requires_grad=True)
    args = (new, torch.full((3,), -2.0), torch.ones(3), torch.ones(3), torch.ones(3))
    plain = rl_loss(*args, parse_rl_config({"epsilon": 10.0, "epsilon_high": 10.0}))
    truncated = rl_loss(*args, config, original_logprobs=torch.tensor([-3.0, math.nan, -2.0]))
    per_plain = float(plain.numerator.detach()) / 3
    assert float(truncated.numerator.detach()) == pytest.approx(per_plain * (2.0 + math.exp(-1) + 1.0), rel=1e-6)


def test_truncated_importance_sampling_without_rollout_logprobs_is_a_no_op_that_warns_once(capsys, monkeypatch):
    monkeypatch.setattr(loss_module, "_warned_tis", False)
    args = ([-1.0, -0.5], [-2.0, -0.1], [1.0, -1.0])
    plain, _, _ = run(CISPO, *args)
    capped, _, _ = run(parse_rl_config({"truncated_importance_sampling": 0.5}), *args)
    run(parse_rl_config({"truncated_importance_sampling": 0.5}), *args)
    assert capped == pytest.approx(plain)
    assert capsys.readouterr().err.count("truncated_importance_sampling has no effect") == 1


def test_truncated_importance_sampling_of_zero_is_off_and_silent(capsys, monkeypatch):
    monkeypatch.setattr(loss_module, "_warned_tis", False)
    run(parse_rl_config({"truncated_importance_sampling": 0}), [-1.0], [-2.0], [1.0])
    assert capsys.readouterr().err == ""


def test_off_policy_diagnostics_cispo_and_ppo_and_weight_zero_tokens_ignored():
    ratios = [0.5, 1.0, 2.0, 6.0]
    new = [math.log(r) - 1.0 for r in ratios] + [5.0]
    old = [-1.0] * 5
    _, _, terms = run(CISPO, new, old, [1.0] * 5, weights=[1.0, 1.0, 1.0, 1.0, 0.0])
    assert terms.metrics["importance_ratio_mean"] == pytest.approx(2.375, rel=1e-5)
    assert terms.metrics["clipped_token_fraction"] == pytest.approx(0.25)
    # PPO counts a token as clipped only when the advantage's sign lets the clip bind: ratio 0.5 with A<0, 6 with A>0.
    _, _, terms = run(PPO, new, old, [-1.0, 1.0, -1.0, 1.0, 1.0], weights=[1.0, 1.0, 1.0, 1.0, 0.0])
    assert terms.metrics["clipped_token_fraction"] == pytest.approx(0.5)


def test_kl_penalty_shapes_advantages_around_the_row_mean():
    config = parse_rl_config({"kl_penalty_coef": 0.5, "loss_fn": "ppo"})
    new, old = [-1.0, -1.0], [-1.0, -1.0]
    ref = torch.tensor([-1.5, -0.5])  # k = (0.5, -0.5), k̄ = 0: A = (1 - 0.25, 1 + 0.25)
    loss, grad, terms = run(config, new, old, [1.0, 1.0], ref_logprobs=ref)
    assert terms.metrics["kl_policy_ref"] == pytest.approx(0.0)
    assert loss == pytest.approx(-(0.75 + 1.25) / 2)
    assert grad == pytest.approx([-0.75 / 2, -1.25 / 2])


def test_max_negative_advantage_cap_mask_prob_ratio_and_kimi_tau():
    new, old = [0.0, -1.0], [-2.0, -1.0]  # ratios e^2, 1
    capped, _, _ = run(parse_rl_config({"loss_fn": "ppo", "epsilon_high": 100.0, "max_negative_advantage_importance_sampling_weight": 3.0}), new, old, [1.0, 1.0])
    assert capped == pytest.approx(-(3.0 + 1.0) / 2)
    masked, _, _ = run(parse_rl_config({"loss_fn": "ppo", "mask_prob_ratio": True}), new, old, [1.0, 1.0])
    assert masked == pytest.approx(-(0.0 + 1.0) / 2)
    tau, _, _ = run(parse_rl_config({"loss_fn": "ppo", "kimi_k2_tau": 0.5, "epsilon_high": 100.0}), new, old, [1.0, 1.0])
    assert tau == pytest.approx(-(math.exp(2) * (1 - 0.5 * 2) + 1.0) / 2)
