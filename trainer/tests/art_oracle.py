"""Run by the parity test with the separate ART venv (trainer/.venv-art, openpipe-art==0.5.17): reads a JSON request
on stdin, answers with ART's own advantages, weights and loss on stdout."""
import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny import build_tokenizer  # noqa: E402  the same tiny tokenizer, built with ART's transformers

from art.loss import loss_fn  # noqa: E402
from art.preprocessing.pack import packed_tensors_from_tokenized_results  # noqa: E402
from art.preprocessing.tokenize import tokenize_trajectory_groups  # noqa: E402
from art.trajectories import Trajectory, TrajectoryGroup  # noqa: E402
from openai.types.chat.chat_completion import Choice  # noqa: E402


def trajectory(data):
    items = [Choice.model_validate(i) if "message" in i else i for i in data["messages_and_choices"]]
    return Trajectory(**{**data, "messages_and_choices": items})


def main():
    request = json.load(sys.stdin)
    tokenizer = build_tokenizer()
    groups = [TrajectoryGroup([trajectory(t) for t in g["trajectories"]]) for g in request["groups"]]
    results = list(tokenize_trajectory_groups(tokenizer, groups, allow_training_without_logprobs=False, scale_rewards=True,
                                              shuffle_group_trajectories=False))
    tokenized = [{"token_ids": r.token_ids, "mask": r.assistant_mask, "advantage": r.advantage, "weight": r.weight} for r in results]
    packed = packed_tensors_from_tokenized_results(results, seq_len=2048, advantage_balance=request["advantage_balance"], verbosity=0)
    mask = packed["assistant_mask"]
    normalised = sorted(zip(packed["advantages"][mask].tolist(), packed["weights"][mask].tolist()))
    losses = []
    for case in request["loss_cases"]:
        pad = lambda xs, v: [v] + xs  # noqa: E731  ART shifts its inputs left by one
        inputs = {
            "logprobs": torch.tensor([pad(case["old"], float("nan"))]),
            "advantages": torch.tensor([pad(case["adv"], 0.0)]),
            "assistant_mask": torch.tensor([pad(case["mask"], 0)]).bool(),
            "weights": torch.tensor([pad(case["w"], 0.0)]),
            "group_ids": torch.tensor([pad(case["segments"], 0)]),
        }
        new = torch.tensor([case["new"] + [0.0]], requires_grad=True)
        out = loss_fn(inputs, new, None, None, case["config"])
        out.mean_policy_loss.backward()
        losses.append({"loss": float(out.mean_policy_loss), "grad": new.grad[0, :-1].tolist()})
    json.dump({"tokenized": tokenized, "normalised": normalised, "losses": losses}, sys.stdout)


main()
