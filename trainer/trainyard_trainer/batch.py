"""Group advantages, per-trajectory weights, the batch-global normalisations and the packing plan
(art-trainer.md §1.3-1.5)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from .config import RLConfig
from .tokenize import InputError, TokenizedResult, exchange_histories, tokenize_history, untrainable_reason

ZERO_VARIANCE_TOLERANCE = 1e-12


def _reward(trajectory: dict[str, Any], where: str) -> float:
    reward = trajectory.get("reward", 0.0)
    if reward is None:
        reward = 0.0
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise InputError(f"{where}.reward must be a finite number, got {reward!r}")
    return float(reward)


def group_advantages(rewards: list[float], scale_rewards: bool) -> list[float] | None:
    """A_i = (r_i - μ) / (σ_pop + 1e-6), or r_i - μ; None for a zero-variance group (all within 1e-12 of the first)."""
    if len(rewards) < 2 or all(abs(r - rewards[0]) <= ZERO_VARIANCE_TOLERANCE for r in rewards):
        return None
    # Centre and measure on rewards scaled to at most 1, so that huge rewards (7e199) do not overflow when squared.
    scale = max(abs(r) for r in rewards)
    scaled = [r / scale for r in rewards]
    mean = sum(scaled) / len(scaled)
    centred = [(r - mean) * scale for r in scaled]
    if not scale_rewards:
        return centred
    sigma = math.sqrt(sum((r - mean) ** 2 for r in scaled) / len(scaled)) * scale
    return [a / (sigma + 1e-6) for a in centred]


@dataclass
class BatchStats:
    num_groups: int = 0
    num_groups_trainable: int = 0
    num_trajectories: int = 0
    num_results: int = 0
    num_dropped_too_long: int = 0


def trajectory_histories(trajectory: dict[str, Any], where: str) -> list[tuple[list[Any], Any, str]]:
    """(items, tools, where) of each history a trajectory trains: its generation-C `exchanges`, or its
    `messages_and_choices` with `tools` and each of its `additional_histories` (each trained as a sequence of its own
    sharing the trajectory's advantage)."""
    legacy = [key for key in ("messages_and_choices", "tools", "additional_histories") if trajectory.get(key)]
    if trajectory.get("exchanges"):
        if legacy:
            raise InputError(f"{where}: a trajectory has either exchanges or {legacy[0]}, not both")
        return exchange_histories(trajectory["exchanges"], where)
    histories = [(trajectory.get("messages_and_choices") or [], trajectory.get("tools"), where)]
    extra = trajectory.get("additional_histories") or []
    if not isinstance(extra, list):
        raise InputError(f"{where}.additional_histories must be a list")
    for h, history in enumerate(extra):
        if not isinstance(history, dict):
            raise InputError(f"{where}.additional_histories[{h}] must be an object")
        histories.append((history.get("messages_and_choices") or [], history.get("tools"), f"{where}.additional_histories[{h}]"))
    return histories


def tokenize_groups(tokenizer: Any, groups: list[Any], config: RLConfig, rng: random.Random, chat_template_kwargs: dict | None = None,
                    vocab_size: int | None = None) -> tuple[list[list[TokenizedResult]], BatchStats]:
    """`vocab_size`: the rows of the model's token embedding, which every token id given in the inputs must index
    (default: the tokenizer's length)."""
    stats = BatchStats()
    out: list[list[TokenizedResult]] = []
    trajectory_index = 0
    for g, group in enumerate(groups):
        where = f"inputs line {g + 1}"
        if not isinstance(group, dict):
            raise InputError(f"{where}: a trajectory group must be an object")
        trajectories = group.get("trajectories", [])
        if not isinstance(trajectories, list) or not all(isinstance(t, dict) for t in trajectories):
            raise InputError(f"{where}: trajectories must be a list of objects")
        stats.num_groups += 1
        stats.num_trajectories += len(trajectories)
        rewards = [_reward(t, f"{where}.trajectories[{i}]") for i, t in enumerate(trajectories)]
        if len(set(rewards)) > 1:
            stats.num_groups_trainable += 1
        advantages = group_advantages(rewards, config.scale_rewards)
        if advantages is None:
            continue
        results: list[TokenizedResult] = []
        untrainable: str | None = None  # where the first trajectory with nothing to train is, and why
        for i, (trajectory, advantage) in enumerate(zip(trajectories, advantages)):
            if advantage == 0:
                continue
            twhere = f"{where}.trajectories[{i}]"
            histories = trajectory_histories(trajectory, twhere)
            own: list[TokenizedResult] = []
            for items, tools, hwhere in histories:
                for seq in tokenize_history(
                    tokenizer, items, tools,
                    allow_training_without_logprobs=config.allow_training_without_logprobs,
                    chat_template_kwargs=chat_template_kwargs, where=hwhere, vocab_size=vocab_size,
                ):
                    if sum(seq.mask):
                        own.append(TokenizedResult(seq.token_ids, seq.mask, seq.logprobs, advantage=advantage, trajectory=trajectory_index, where=twhere))
            if not own and untrainable is None:
                items = [item for history in histories for item in history[0]]
                untrainable = f"{twhere}: {untrainable_reason(items, config.allow_training_without_logprobs)}"
            trajectory_index += 1
            weight = 1.0 / (sum(r.num_trainable for r in own) + 1e-6)
            for result in own:
                result.weight = weight
            results.extend(own)
        if not results:
            # Rewards that differ are something to learn: completing the step unchanged would hide that it was lost.
            raise InputError(f"{untrainable} (its group's rewards differ, yet no trajectory of the group has a token to train)")
        # Shared prompt: the longest common prefix, capped one token before the first sampled logprob.
        prompt_length = len(list(takewhile(lambda column: len(set(column)) == 1, zip(*(r.token_ids for r in results)))))
        first_sampled = min(next((i for i, m in enumerate(r.mask) if m), len(r.mask)) for r in results)
        prompt_length = max(min(prompt_length, first_sampled) - 1, 0)
        prompt_id = rng.getrandbits(63)
        for result in results:
            result.prompt_id, result.prompt_length = prompt_id, prompt_length
        rng.shuffle(results)
        out.append(results)
    stats.num_results = sum(len(r) for r in out)
    return out, stats


def row_length(groups: list[list[TokenizedResult]], config: RLConfig, max_seq_length: int) -> int:
    if config.packed_sequence_length is not None:
        if config.packed_sequence_length > max_seq_length:
            raise InputError(f"experimental_config.packed_sequence_length {config.packed_sequence_length} exceeds the model's maximum {max_seq_length}")
        return config.packed_sequence_length
    longest = max((len(r.token_ids) for g in groups for r in g), default=1)
    return min(math.ceil(longest / 2048) * 2048, max_seq_length)


def pack(groups: list[list[TokenizedResult]], seq_len: int, rng: random.Random) -> tuple[list[list[TokenizedResult]], int]:
    """ART's greedy row plan: results in order, a shared prompt counted once per row, rows shuffled at the end.

    Rows are trained one at a time as gradient accumulation over their results (the same gradients as a packed
    forward with ART's attention mask). Results longer than `seq_len` are dropped, as ART does.
    """
    rows: list[list[TokenizedResult]] = []
    current: list[TokenizedResult] = []
    used = 0
    prompts: set[int] = set()
    dropped = 0
    for group in groups:
        for result in group:
            if len(result.token_ids) > seq_len:
                dropped += 1
                continue
            cost = len(result.token_ids) - (result.prompt_length if result.prompt_id in prompts else 0)
            if current and used + cost > seq_len:
                rows.append(current)
                current, used, prompts = [], 0, set()
                cost = len(result.token_ids)
            current.append(result)
            used += cost
            prompts.add(result.prompt_id)
    if current:
        rows.append(current)
    rng.shuffle(rows)
    return rows, dropped


def normalise(rows: list[list[TokenizedResult]], advantage_balance: float) -> None:
    """Batch-global: weights to mean 1 over the trainable tokens, the advantage balance, then A / mean(|A|·w).

    Every trainable token of a result has the same advantage and weight, so token means are count-weighted means."""
    results = [r for row in rows for r in row]
    tokens = sum(r.num_trainable for r in results)
    if not tokens:
        return
    mean_weight = sum(r.weight * r.num_trainable for r in results) / tokens
    for r in results:
        r.weight /= mean_weight
        a = r.advantage
        if advantage_balance > 0 and a <= 0:
            a *= 1 - advantage_balance
        elif advantage_balance < 0 and a >= 0:
            a *= 1 + advantage_balance
        r.extra["advantage"] = a
    mean_abs = sum(abs(r.extra["advantage"]) * r.weight * r.num_trainable for r in results) / tokens
    for r in results:
        r.advantage = r.extra.pop("advantage") / mean_abs if mean_abs > 0 else 0.0
