"""The 25 keys of ART's ExperimentalTrainingConfig: defaults, validation, and the effective RL settings.

Every key is either honoured or refused with a `ConfigError` that names it (the trainer exits 3 on it, so the job
ends FAILED without a retry). `null` counts as absent before any default applies (a null epsilon_high must not
silently become epsilon).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class ConfigError(Exception):
    """A job the trainer cannot run as asked: retrying will not help (exit code 3)."""


class UnfitMachine(Exception):
    """This machine cannot run the trainer as it was started (a requested device it does not have): the job is not at
    fault and another machine may run it (exit code 4)."""


KEYS = (
    "advantage_balance",
    "allow_training_without_logprobs",
    "epsilon",
    "epsilon_high",
    "importance_sampling_level",
    "kimi_k2_tau",
    "kl_penalty_coef",
    "kl_penalty_reference_step",
    "kl_penalty_source",
    "kl_penalty_step_lag",
    "kl_ref_adapter_path",
    "learning_rate",
    "logprob_calculation_chunk_size",
    "loss_fn",
    "mask_prob_ratio",
    "max_negative_advantage_importance_sampling_weight",
    "normalize_advantages",
    "num_trajectories_learning_rate_multiplier_power",
    "packed_sequence_length",
    "plot_tensors",
    "ppo",
    "precalculate_logprobs",
    "scale_learning_rate_by_reward_std_dev",
    "scale_rewards",
    "truncated_importance_sampling",
)

IS_LEVELS = ("token", "sequence", "average", "geometric_average")


@dataclass(frozen=True)
class RLConfig:
    learning_rate: float = 5e-6
    loss_fn: str = "cispo"  # "cispo" | "ppo"
    epsilon: float = 1.0
    epsilon_high: float = 4.0
    importance_sampling_level: str = "token"
    advantage_balance: float = 0.0
    allow_training_without_logprobs: bool = False
    kimi_k2_tau: float | None = None
    kl_penalty_coef: float = 0.0
    kl_penalty_reference_step: int | None = None
    kl_penalty_source: str = "current_learner"
    kl_penalty_step_lag: int | None = None
    kl_ref_adapter_path: str | None = None
    logprob_calculation_chunk_size: int = 1024
    mask_prob_ratio: bool = False
    max_negative_advantage_importance_sampling_weight: float | None = None
    scale_rewards: bool = True  # effective: scale_rewards AND normalize_advantages
    num_trajectories_learning_rate_multiplier_power: float = 0.0
    packed_sequence_length: int | None = None
    precalculate_logprobs: bool = False
    truncated_importance_sampling: float | None = None


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"experimental_config.{key} must be a finite number, got {value!r}")
    return float(value)


def _integer(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < minimum:
        raise ConfigError(f"experimental_config.{key} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"experimental_config.{key} must be true or false, got {value!r}")
    return value


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"experimental_config.{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def present(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The keys that carry a value (null is absent); unknown keys are refused by name."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"experimental_config must be an object, got {type(raw).__name__}")
    for key in raw:
        if key not in KEYS:
            raise ConfigError(f"experimental_config.{key} is not a key this trainer knows (ART's ExperimentalTrainingConfig has {len(KEYS)})")
    return {k: v for k, v in raw.items() if v is not None}


def parse_rl_config(raw: dict[str, Any] | None) -> RLConfig:
    c = present(raw)
    out: dict[str, Any] = {}

    loss_fn = _choice("loss_fn", c["loss_fn"], ("cispo", "ppo")) if "loss_fn" in c else None
    if "ppo" in c:
        ppo = _boolean("ppo", c["ppo"])
        if loss_fn is not None and ppo != (loss_fn == "ppo"):
            raise ConfigError(f"experimental_config.ppo={ppo} conflicts with loss_fn={loss_fn!r}")
        loss_fn = loss_fn or ("ppo" if ppo else "cispo")
    loss_fn = loss_fn or "cispo"
    out["loss_fn"] = loss_fn

    # ε defaults: ppo 0.2 / ε_h = ε; cispo 1.0 / 4.0 (an absent epsilon_high takes the loss default).
    epsilon = _number("epsilon", c["epsilon"]) if "epsilon" in c else (0.2 if loss_fn == "ppo" else 1.0)
    if epsilon < 0:
        raise ConfigError(f"experimental_config.epsilon must be >= 0, got {epsilon!r}")
    if "epsilon_high" in c:
        epsilon_high = _number("epsilon_high", c["epsilon_high"])
        if epsilon_high < 0:
            raise ConfigError(f"experimental_config.epsilon_high must be >= 0, got {epsilon_high!r}")
    else:
        epsilon_high = epsilon if loss_fn == "ppo" else 4.0
    out["epsilon"], out["epsilon_high"] = epsilon, epsilon_high

    if "learning_rate" in c:
        lr = _number("learning_rate", c["learning_rate"])
        if lr <= 0:
            raise ConfigError(f"experimental_config.learning_rate must be positive, got {lr!r}")
        out["learning_rate"] = lr
    if "importance_sampling_level" in c:
        out["importance_sampling_level"] = _choice("importance_sampling_level", c["importance_sampling_level"], IS_LEVELS)
    if "advantage_balance" in c:
        beta = _number("advantage_balance", c["advantage_balance"])
        if not -1.0 <= beta <= 1.0:
            raise ConfigError(f"experimental_config.advantage_balance must be in [-1, 1], got {beta!r}")
        out["advantage_balance"] = beta
    for key in ("allow_training_without_logprobs", "mask_prob_ratio", "precalculate_logprobs"):
        if key in c:
            out[key] = _boolean(key, c[key])
    # plot_tensors (debug heatmaps) and scale_learning_rate_by_reward_std_dev (a dead flag in ART: forwarded, never
    # applied) have no training effect in ART either: accepted and validated, nothing else.
    for key in ("plot_tensors", "scale_learning_rate_by_reward_std_dev"):
        if key in c:
            _boolean(key, c[key])
    if "kimi_k2_tau" in c:
        out["kimi_k2_tau"] = _number("kimi_k2_tau", c["kimi_k2_tau"])
    if "kl_penalty_coef" in c:
        coef = _number("kl_penalty_coef", c["kl_penalty_coef"])
        if coef < 0:
            raise ConfigError(f"experimental_config.kl_penalty_coef must be >= 0, got {coef!r}")
        out["kl_penalty_coef"] = coef
    if "kl_penalty_source" in c:
        out["kl_penalty_source"] = _choice("kl_penalty_source", c["kl_penalty_source"], ("current_learner", "sample"))
    if "kl_penalty_reference_step" in c:
        out["kl_penalty_reference_step"] = _integer("kl_penalty_reference_step", c["kl_penalty_reference_step"], 0)
    if "kl_penalty_step_lag" in c:
        out["kl_penalty_step_lag"] = _integer("kl_penalty_step_lag", c["kl_penalty_step_lag"], 1)
        if "kl_penalty_reference_step" in out:
            raise ConfigError("experimental_config.kl_penalty_step_lag and kl_penalty_reference_step are exclusive")
    if "kl_ref_adapter_path" in c:
        path = c["kl_ref_adapter_path"]
        if not isinstance(path, str) or not path:
            raise ConfigError(f"experimental_config.kl_ref_adapter_path must be a path, got {path!r}")
        if "kl_penalty_reference_step" in out or "kl_penalty_step_lag" in out:
            raise ConfigError("experimental_config.kl_ref_adapter_path is exclusive with kl_penalty_reference_step and kl_penalty_step_lag")
        out["kl_ref_adapter_path"] = path
    if "logprob_calculation_chunk_size" in c:
        out["logprob_calculation_chunk_size"] = _integer("logprob_calculation_chunk_size", c["logprob_calculation_chunk_size"], 1)
    if "max_negative_advantage_importance_sampling_weight" in c:
        cap = _number("max_negative_advantage_importance_sampling_weight", c["max_negative_advantage_importance_sampling_weight"])
        if cap < 0:
            raise ConfigError(f"experimental_config.max_negative_advantage_importance_sampling_weight must be >= 0, got {cap!r}")
        out["max_negative_advantage_importance_sampling_weight"] = cap or None  # 0 counts as off
    scale = _boolean("scale_rewards", c["scale_rewards"]) if "scale_rewards" in c else True
    normalize = _boolean("normalize_advantages", c["normalize_advantages"]) if "normalize_advantages" in c else True
    out["scale_rewards"] = scale and normalize
    if "num_trajectories_learning_rate_multiplier_power" in c:
        out["num_trajectories_learning_rate_multiplier_power"] = _number(
            "num_trajectories_learning_rate_multiplier_power", c["num_trajectories_learning_rate_multiplier_power"]
        )
    if "packed_sequence_length" in c:
        out["packed_sequence_length"] = _integer("packed_sequence_length", c["packed_sequence_length"], 1)
    if "truncated_importance_sampling" in c:
        cap = _number("truncated_importance_sampling", c["truncated_importance_sampling"])
        if cap < 0:
            raise ConfigError(f"experimental_config.truncated_importance_sampling must be >= 0, got {cap!r}")
        out["truncated_importance_sampling"] = cap or None  # 0 counts as off
    return RLConfig(**out)


@dataclass(frozen=True)
class SFTConfig:
    batch_size: int = 2
    learning_rate: float | list[float] = 5e-5
    assistant_turns: str = "all"  # "all" | "last"


def parse_sft_config(raw: dict[str, Any] | None, experimental: dict[str, Any] | None) -> SFTConfig:
    present(experimental)  # unknown keys are refused; the RL keys do not apply to SFT (as in ART)
    c = {k: v for k, v in (raw or {}).items() if v is not None}
    out: dict[str, Any] = {}
    if "batch_size" in c and c["batch_size"] != "auto":
        out["batch_size"] = _sft_int("batch_size", c["batch_size"])
    if "learning_rate" in c:
        lr = c["learning_rate"]
        if isinstance(lr, list):
            if not lr:
                raise ConfigError("sft_config.learning_rate must not be an empty list")
            out["learning_rate"] = [_sft_lr(v) for v in lr]
        else:
            out["learning_rate"] = _sft_lr(lr)
    if "assistant_turns" in c:
        if c["assistant_turns"] not in ("all", "last"):
            raise ConfigError(f"sft_config.assistant_turns must be all or last, got {c['assistant_turns']!r}")
        out["assistant_turns"] = c["assistant_turns"]
    return SFTConfig(**out)


def _sft_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise ConfigError(f"sft_config.{key} must be a positive integer, got {value!r}")
    return int(value)


def _sft_lr(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"sft_config.learning_rate must be positive numbers, got {value!r}")
    return float(value)
