"""ART's RL loss for one packed row (art-trainer.md §1.7), on aligned per-token tensors.

All inputs are 1-D over the row's positions, already aligned: position t holds the log-probability of the token at t
under the policy (`new_logprobs`, with gradient), the sampler's log-probability of that token (`old_logprobs`, NaN
where unknown), the assistant mask, the advantage and the weight. Everything is computed in fp32 whatever the model's
dtype. The caller divides `numerator` by the row's assistant-token count (`LossTerms.loss` does it for one call).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch

from .config import RLConfig

# exp() of a log-ratio beyond this overflows fp16 gradients and makes no difference after clipping: both the token
# and the sequence log-ratio are clamped here (no gradient beyond it), so sampler log-probabilities like -9999 give a
# finite loss and gradient.
MAX_LOG_RATIO = 20.0

_warned_tis = False


@dataclass
class LossTerms:
    numerator: torch.Tensor  # Σ_t L_t·w_t·m_t (with gradient)
    num_tokens: float  # Σ_t m_t
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def loss(self) -> torch.Tensor:
        return self.numerator / (self.num_tokens + 1e-18)


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
    metrics: dict[str, float] = {}
    num_tokens = float(m.sum().item())
    if config.kl_penalty_coef > 0 and ref_logprobs is not None:
        source = old if config.kl_penalty_source == "sample" else detached
        ref = torch.where(m_bool, ref_logprobs.to(torch.float32), source)
        k = (source - ref) * m
        # k̄ is the mean over the whole packed row; a caller that splits a row into sequences passes the row's.
        k_mean = k.sum() / (m.sum() + 1e-18) if kl_mean is None else torch.tensor(kl_mean)
        adv = adv + config.kl_penalty_coef * (k_mean - k) * m
        metrics["kl_policy_ref"] = float(k_mean.item())

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

    counted = m_bool & (w > 0)
    n_counted = int(counted.sum().item())
    if n_counted:
        metrics["importance_ratio_mean"] = float(raw_ratio[counted].mean().item())
        metrics["clipped_token_fraction"] = float(clipped_tokens[counted].float().mean().item())
    if entropies is not None and num_tokens:
        metrics["entropy"] = float(((entropies.to(torch.float32).detach() * w * m).sum() / num_tokens).item())
    finite_old = m_bool & torch.isfinite(old_logprobs.to(torch.float32))
    if int(finite_old.sum().item()) > 1:
        a = torch.exp(old_logprobs.to(torch.float32)[finite_old])
        b = torch.exp(detached[finite_old])
        a, b = a - a.mean(), b - b.mean()
        denom = torch.sqrt((a * a).sum() * (b * b).sum())
        if float(denom) > 0:
            metrics["probs_corr"] = float(((a * b).sum() / denom).item())
    return LossTerms(numerator=numerator, num_tokens=num_tokens, metrics=metrics)
