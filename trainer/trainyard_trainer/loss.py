"""ART's RL loss for one packed row (art-trainer.md §1.7), on aligned per-token tensors.

All inputs are 1-D over the row's positions, already aligned: position t holds the log-probability of the token at t
under the policy (`new_logprobs`, with gradient), the sampler's log-probability of that token (`old_logprobs`, NaN
where unknown), the assistant mask, the advantage and the weight. Everything is computed in fp32 whatever the model's
dtype. The caller divides `numerator` by the row's assistant-token count (`LossTerms.loss` does it for one call).
"""
from __future__ import annotations

import sys

import torch

from .config import RLConfig

# exp() of a log-ratio beyond this overflows fp16 gradients and makes no difference after clipping: both the token
# and the sequence log-ratio are clamped here (no gradient beyond it), so sampler log-probabilities like -9999 give a
# finite loss and gradient.
MAX_LOG_RATIO = 20.0

_warned_tis = False


class LossTerms:
    """The loss terms of one call. `numerator` (with gradient) stays on the device; `num_tokens` and `metrics` are
    read from it only when first asked for, so a caller that runs backward first does not wait for the GPU between
    the forward and the backward pass (a read waits for all queued work)."""

    def __init__(self, numerator: torch.Tensor, num_tokens: torch.Tensor, pending: dict[str, tuple[torch.Tensor, torch.Tensor | None]]):
        self.numerator = numerator  # Σ_t L_t·w_t·m_t (with gradient)
        self._num_tokens = num_tokens  # Σ_t m_t, 0-dim
        self._pending = pending  # name -> (0-dim value, 0-dim bool condition for the metric to be reported, or None)
        self._read: tuple[float, dict[str, float]] | None = None

    def _values(self) -> tuple[float, dict[str, float]]:
        if self._read is None:
            names = list(self._pending)
            tensors = [self._num_tokens] + [t for name in names for t in (self._pending[name][0], self._pending[name][1])
                                            if t is not None]
            values = iter(torch.stack([t.detach().to(torch.float64).reshape(()) for t in tensors]).tolist())  # one read
            num_tokens = next(values)
            metrics = {}
            for name in names:
                value = next(values)
                if self._pending[name][1] is None or next(values):
                    metrics[name] = value
            self._read = (num_tokens, metrics)
        return self._read

    @property
    def num_tokens(self) -> float:  # Σ_t m_t
        return self._values()[0]

    @property
    def metrics(self) -> dict[str, float]:
        return self._values()[1]

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
    pending: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    num_tokens = m.sum()
    if config.kl_penalty_coef > 0 and ref_logprobs is not None:
        source = old if config.kl_penalty_source == "sample" else detached
        ref = torch.where(m_bool, ref_logprobs.to(torch.float32), source)
        k = (source - ref) * m
        # k̄ is the mean over the whole packed row; a caller that splits a row into sequences passes the row's.
        k_mean = k.sum() / (num_tokens + 1e-18) if kl_mean is None else torch.full((), kl_mean, dtype=torch.float32, device=m.device)
        adv = adv + config.kl_penalty_coef * (k_mean - k) * m
        pending["kl_policy_ref"] = (k_mean, None)

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

    # Metrics as 0-dim tensors, masked sums in place of boolean indexing (which would wait for the GPU).
    counted = m_bool & (w > 0)
    n_counted = counted.sum()
    per_counted = n_counted.clamp(min=1).to(torch.float32)
    pending["importance_ratio_mean"] = (torch.where(counted, raw_ratio, 0.0).sum() / per_counted, n_counted > 0)
    pending["clipped_token_fraction"] = (torch.where(counted, clipped_tokens.float(), 0.0).sum() / per_counted, n_counted > 0)
    if entropies is not None:
        pending["entropy"] = ((entropies.to(torch.float32).detach() * w * m).sum() / num_tokens.clamp(min=1.0), num_tokens > 0)
    old_f32 = old_logprobs.to(torch.float32)
    finite_old = m_bool & torch.isfinite(old_f32)
    n_finite = finite_old.sum()
    a = torch.where(finite_old, torch.exp(torch.where(finite_old, old_f32, 0.0)), 0.0)
    b = torch.where(finite_old, torch.exp(detached), 0.0)
    per_finite = n_finite.clamp(min=1).to(torch.float32)
    a = torch.where(finite_old, a - a.sum() / per_finite, 0.0)
    b = torch.where(finite_old, b - b.sum() / per_finite, 0.0)
    denom = torch.sqrt((a * a).sum() * (b * b).sum())
    pending["probs_corr"] = ((a * b).sum() / torch.where(denom > 0, denom, 1.0), (n_finite > 1) & (denom > 0))
    return LossTerms(numerator, num_tokens, pending)
