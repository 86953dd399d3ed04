"""ART's RL loss for one packed row (art-trainer.md §1.7), on aligned per-token tensors.

All inputs are 1-D over the row's positions, already aligned: position t holds the log-probability of the token at t
under the policy (`new_logprobs`, with gradient), the sampler's log-probability of that token (`old_logprobs`, NaN
where unknown), the assistant mask, the advantage and the weight. Everything is computed in fp32 whatever the model's
dtype. The caller divides `numerator` by the row's assistant-token count (`LossTerms.loss` does it for one call).
"""
from __future__ import annotations

import math
import sys

import torch

from .config import RLConfig

# exp() of a log-ratio beyond this overflows fp16 gradients and makes no difference after clipping: both the token
# and the sequence log-ratio are clamped here (no gradient beyond it), so sampler log-probabilities like -9999 give a
# finite loss and gradient.
MAX_LOG_RATIO = 20.0

_warned_tis = False


class LossTerms:
    """The loss terms of one call. `numerator` (with gradient) stays on the device, and so do the sums behind the
    metrics (`sums`: 0-dim tensors). They are read only when first asked for, and `combine` reads the terms of several
    calls at once, so a caller that runs backward first never waits for the GPU between a forward and its backward
    pass (a read waits for all queued work).

    The metrics are built from sums so that a packed row split over several calls reports what one call over the whole
    row would: `probs_corr` is the Pearson correlation over all of the row's positions (ART's definition), not a mean
    of per-sequence correlations."""

    def __init__(self, numerator: torch.Tensor, sums: dict[str, torch.Tensor]):
        self.numerator = numerator  # Σ_t L_t·w_t·m_t (with gradient)
        self.sums = sums
        self._read: dict[str, float] | None = None

    @property
    def num_tokens(self) -> float:  # Σ_t m_t
        return self.read()["tokens"]

    @property
    def metrics(self) -> dict[str, float]:
        return metrics_from_sums(self.read())

    @property
    def loss(self) -> torch.Tensor:
        return self.numerator / (self.num_tokens + 1e-18)

    def read(self) -> dict[str, float]:
        if self._read is None:
            self._read = combine([self])
        return self._read


def combine(terms: list[LossTerms]) -> dict[str, float]:
    """The sums of several calls' terms added up, read from the device in one go."""
    names = sorted({name for t in terms for name in t.sums})
    if not terms:
        return {}
    device = terms[0].numerator.device
    zero = torch.zeros((), dtype=torch.float64, device=device)
    stacked = torch.stack([sum((t.sums[name].detach().to(torch.float64) for t in terms if name in t.sums), zero) for name in names])
    return dict(zip(names, stacked.tolist()))


def pearson(sums: dict[str, float]) -> float | None:
    """The Pearson correlation from its sufficient statistics, or None when it is undefined (fewer than two positions,
    or a constant side)."""
    n = sums.get("corr_n", 0.0)
    if n < 2:
        return None
    cov = sums["corr_ab"] - sums["corr_a"] * sums["corr_b"] / n
    var_a = sums["corr_aa"] - sums["corr_a"] ** 2 / n
    var_b = sums["corr_bb"] - sums["corr_b"] ** 2 / n
    if var_a <= 0 or var_b <= 0:
        return None
    return cov / math.sqrt(var_a * var_b)


def metrics_from_sums(sums: dict[str, float]) -> dict[str, float]:
    """Token means over the positions the sums cover; a metric with nothing to average over is left out."""
    metrics: dict[str, float] = {}
    counted = sums.get("counted", 0.0)
    if counted > 0:
        metrics["importance_ratio_mean"] = sums["ratio"] / counted
        metrics["clipped_token_fraction"] = sums["clipped"] / counted
    tokens = sums.get("tokens", 0.0)
    if "entropy" in sums and tokens > 0:
        metrics["entropy"] = sums["entropy"] / tokens
    if "kl" in sums and tokens > 0:
        metrics["kl_policy_ref"] = sums["kl"] / tokens
    corr = pearson(sums)
    if corr is not None:
        metrics["probs_corr"] = corr
    return metrics


def _segment_mean(values: torch.Tensor, mask: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """For each position, the mean of `values` over the masked positions of its segment."""
    unique, inverse = torch.unique(segment_ids, return_inverse=True)
    sums = torch.zeros(len(unique), dtype=values.dtype, device=values.device).index_add(0, inverse, values * mask)
    counts = torch.zeros(len(unique), dtype=values.dtype, device=values.device).index_add(0, inverse, mask)
    return (sums / counts.clamp(min=1.0))[inverse]


def rl_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    config: RLConfig,
    *,
    segment_ids: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    original_logprobs: torch.Tensor | None = None,
    entropies: torch.Tensor | None = None,
    kl_mean: float | None = None,
) -> LossTerms:
    global _warned_tis
    m_bool = mask.bool()
    m = m_bool.to(torch.float32)
    new = new_logprobs.to(torch.float32)
    new_safe = torch.where(m_bool, new, torch.zeros_like(new))  # masked positions cannot reach the loss or gradient
    detached = new_safe.detach()
    old = old_logprobs.to(torch.float32)
    # 1. Unknown (NaN) or non-finite sampler log-probabilities count as on-policy: ratio 1.
    old = torch.where(m_bool & torch.isfinite(old), old, detached)
    adv = torch.where(m_bool, advantages.to(torch.float32), torch.zeros_like(m))
    w = torch.where(m_bool, weights.to(torch.float32), torch.zeros_like(m))
    delta = new_safe - old

    # 2. Importance-sampling level (sequence ratios aggregate the log-ratio over the segment before any clipping).
    level = config.importance_sampling_level
    log_tok = delta.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    if level == "token":
        ratio = torch.exp(log_tok)
    else:
        seg = segment_ids if segment_ids is not None else torch.zeros_like(m, dtype=torch.long)
        log_seq = _segment_mean(delta, m, seg).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        if level == "sequence":
            ratio = torch.exp(log_seq)
        elif level == "average":
            ratio = (torch.exp(log_tok) + torch.exp(log_seq)) / 2
        else:  # geometric_average
            ratio = torch.exp((log_tok + log_seq) / 2)
    raw_ratio = ratio.detach()

    low, high = 1.0 - config.epsilon, 1.0 + config.epsilon_high
    # 4. The cap applies to every token, whatever the advantage's sign (despite the key's name).
    cap = config.max_negative_advantage_importance_sampling_weight
    if cap:
        ratio = torch.clamp(ratio, max=cap)
    # 5. Ratios outside the trust region become the constant 0.
    if config.mask_prob_ratio:
        ratio = torch.where((ratio > low) & (ratio < high), ratio, torch.zeros_like(ratio))
    # 6. Kimi K2's advantage correction.
    if config.kimi_k2_tau is not None:
        adv = adv - config.kimi_k2_tau * delta.detach()
    # 7. KL penalty as advantage shaping (no KL term in the loss).
    num_tokens = m.sum()
    sums: dict[str, torch.Tensor] = {"tokens": num_tokens}
    if config.kl_penalty_coef > 0 and ref_logprobs is not None:
        source = old if config.kl_penalty_source == "sample" else detached
        ref = torch.where(m_bool, ref_logprobs.to(torch.float32), source)
        k = (source - ref) * m
        # k̄ is the mean over the whole packed row; a caller that splits a row into several calls passes the row's.
        k_mean = k.sum() / (num_tokens + 1e-18) if kl_mean is None else torch.full((), kl_mean, dtype=torch.float32, device=m.device)
        adv = adv + config.kl_penalty_coef * (k_mean - k) * m
        sums["kl"] = k_mean * num_tokens  # reported as k̄: kl / tokens

    # 8. Surrogate.
    clipped = torch.clamp(ratio, low, high)
    if config.loss_fn == "ppo":
        per_token = -torch.minimum(ratio * adv, clipped * adv)
        clipped_tokens = ((raw_ratio > high) & (adv > 0)) | ((raw_ratio < low) & (adv < 0))
    else:
        per_token = -clipped.detach() * adv * new_safe
        clipped_tokens = (raw_ratio < low) | (raw_ratio > high)

    # 9. Truncated importance sampling against the rollout log-probabilities (precalculate_logprobs mode).
    tis = config.truncated_importance_sampling
    if tis:
        if original_logprobs is None:
            if not _warned_tis:
                _warned_tis = True
                print(
                    "truncated_importance_sampling has no effect without precalculate_logprobs (no rollout logprobs to correct)",
                    file=sys.stderr,
                )
        else:
            orig = original_logprobs.to(torch.float32)
            orig = torch.where(m_bool & torch.isfinite(orig), orig, detached)
            factor = torch.clamp(torch.exp((old - orig).clamp(max=MAX_LOG_RATIO)), max=tis)
            per_token = per_token * factor.detach()

    # 10. Reduction: Σ L·w·m; the caller divides by the row's assistant-token count.
    numerator = (per_token * w * m).sum()
    sums["loss"] = numerator.detach()

    # Metric sums as 0-dim tensors, masked sums in place of boolean indexing (which would wait for the GPU).
    counted = m_bool & (w > 0)
    sums["counted"] = counted.sum().to(torch.float32)
    sums["ratio"] = torch.where(counted, raw_ratio, 0.0).sum()
    sums["clipped"] = torch.where(counted, clipped_tokens.float(), 0.0).sum()
    if entropies is not None:
        sums["entropy"] = (entropies.to(torch.float32).detach() * w * m).sum()
    # probs_corr: Pearson of exp(o) and exp(ℓ) over the positions with a finite sampler log-probability, as sums (fp64)
    # that add up across calls.
    old_f64 = old_logprobs.to(torch.float64)
    finite_old = m_bool & torch.isfinite(old_f64)
    a = torch.where(finite_old, torch.exp(torch.where(finite_old, old_f64, 0.0)), 0.0)
    b = torch.where(finite_old, torch.exp(detached.to(torch.float64)), 0.0)
    sums.update(corr_n=finite_old.sum().to(torch.float64), corr_a=a.sum(), corr_b=b.sum(), corr_aa=(a * a).sum(), corr_bb=(b * b).sum(), corr_ab=(a * b).sum())
    return LossTerms(numerator, sums)
