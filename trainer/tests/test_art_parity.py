"""Parity with ART itself as the oracle: openpipe-art==0.5.17 (in its own venv, trainer/.venv-art, from
requirements-art.lock: its transformers pin conflicts with the trainer's) computes tokenization, advantages, weights
and the loss of the same batch, and this trainer agrees. Skipped when that venv is absent (trainer/setup.sh --art)."""
import json
import math
import os
import random
import subprocess

import pytest
import torch

from tiny import token_choice
from trainyard_trainer.batch import normalise, pack, tokenize_groups
from trainyard_trainer.config import parse_rl_config
from trainyard_trainer.loss import rl_loss

ART_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv-art", "bin", "python")
pytestmark = pytest.mark.skipif(not os.path.exists(ART_PYTHON), reason="no ART venv (trainer/setup.sh --art creates it)")


def batch(tokenizer):
    words = [["maybe"], ["yes", "no"], ["no"], ["hello", "the", "weather"], ["sunny"], ["ok"]]
    groups = []
    for g, rewards in enumerate([[1.0, 0.0, 0.5], [2.0, -1.0, 0.0], [1.0, 1.0, 1.0]]):
        trajectories = []
        for t, reward in enumerate(rewards):
            w = words[(g + t) % len(words)] + ["<|im_end|>"]
            logprobs = [-0.1 * (k + 1) - 0.3 * t for k in range(len(w))]
            trajectories.append({"messages_and_choices": [{"role": "system", "content": "answer one word"},
                                                          {"role": "user", "content": "say one word please" if g else "hi"},
                                                          token_choice(tokenizer, w, logprobs)], "reward": reward})
        groups.append({"trajectories": trajectories})
    return groups


def loss_cases():
    gen = torch.Generator().manual_seed(0)
    cases = []
    for config in ({}, {"ppo": True}, {"ppo": True, "importance_sampling_level": "sequence"}, {"importance_sampling_level": "geometric_average"},
                   {"ppo": True, "epsilon": 0.1, "epsilon_high": 0.3, "kimi_k2_tau": 0.2}, {"mask_prob_ratio": True, "max_negative_advantage_importance_sampling_weight": 1.5}):
        n = 12
        new = (-torch.rand(n, generator=gen) * 2).tolist()
        old = [x + float(d) for x, d in zip(new, torch.randn(n, generator=gen) * 0.5)]
        old[3] = float("nan")
        cases.append({"config": config, "new": new, "old": old, "adv": torch.randn(n, generator=gen).tolist(),
                      "w": (torch.rand(n, generator=gen) + 0.5).tolist(), "mask": [0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0],
                      "segments": [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]})
    return cases


def ours_config(art_config):
    c = dict(art_config)
    if c.pop("ppo", False):
        c["loss_fn"] = "ppo"
    return parse_rl_config(c)


@pytest.fixture(scope="module")
def art(tokenizer):
    request = {"groups": batch(tokenizer), "advantage_balance": 0.25, "loss_cases": loss_cases()}
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([ART_PYTHON, os.path.join(os.path.dirname(__file__), "art_oracle.py")], input=json.dumps(request),
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return request, json.loads(done.stdout)


def test_tokenization_advantages_and_weights_match_art(art, tokenizer):
    request, expected = art
    groups, _ = tokenize_groups(tokenizer, request["groups"], parse_rl_config({}), random.Random(0))
    ours = sorted((r.token_ids, r.mask, r.advantage, r.weight) for g in groups for r in g)
    theirs = sorted((t["token_ids"], t["mask"], t["advantage"], t["weight"]) for t in expected["tokenized"])
    assert [(a, b) for a, b, _, _ in ours] == [(a, b) for a, b, _, _ in theirs]
    assert [c for _, _, c, _ in ours] == pytest.approx([c for _, _, c, _ in theirs], rel=1e-6)
    assert [d for _, _, _, d in ours] == pytest.approx([d for _, _, _, d in theirs], rel=1e-6)
    rows, _ = pack(groups, 2048, random.Random(0))
    normalise(rows, request["advantage_balance"])
    normalised = sorted((r.advantage, r.weight) for row in rows for r in row for m in r.mask if m)
    assert len(normalised) == len(expected["normalised"])
    for (a, w), (ea, ew) in zip(normalised, expected["normalised"]):
        assert a == pytest.approx(ea, rel=1e-5) and w == pytest.approx(ew, rel=1e-5)


def test_loss_and_gradients_match_art(art):
    request, expected = art
    for case, theirs in zip(request["loss_cases"], expected["losses"]):
        new = torch.tensor(case["new"], requires_grad=True)
        terms = rl_loss(new, torch.tensor(case["old"]), torch.tensor(case["mask"], dtype=torch.float32), torch.tensor(case["adv"]),
                        torch.tensor(case["w"]), ours_config(case["config"]), segment_ids=torch.tensor(case["segments"]))
        terms.loss.backward()
        assert float(terms.loss.detach()) == pytest.approx(theirs["loss"], rel=1e-5, abs=1e-7), case["config"]
        assert new.grad.tolist() == pytest.approx(theirs["grad"], rel=1e-4, abs=1e-7), case["config"]
        assert not any(math.isnan(g) for g in new.grad.tolist())
