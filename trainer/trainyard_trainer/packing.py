"""Sequence packing: several sequences in one forward pass, each with its own positions (0..n-1), attention never
crossing from one sequence into another.

A packed forward gets the sequences concatenated into one row of token ids, position ids that restart at every
sequence, and the cumulative sequence lengths (`cu_seq_lens_q/k`, the variable-length form of flash attention), which
transformers hands through to the attention function. The attention function registered here runs
- on CUDA in bf16/fp16: torch's variable-length flash attention (`torch.nn.attention.varlen`), one kernel per layer
  for the whole row, no padding and no S x S mask; a row of one sequence goes through scaled-dot-product attention
  with cuDNN's fused kernel first instead (`single_sequence = "sdpa"`, about twice as fast on an H200);
- elsewhere (CPU, fp32): causal scaled-dot-product attention over each sequence in turn, which costs Σ n_i² rather
  than (Σ n_i)² and gives the same numbers as one forward per sequence.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ATTENTION = "trainyard_packed"

_registered = False
_varlen = None  # torch.nn.attention.varlen.varlen_attn with the keyword arguments this torch release takes, or False
# How a CUDA row holding one sequence attends: "varlen" (the packed rows' kernel) or "sdpa" (scaled_dot_product_attention,
# cuDNN's kernel first: see sdpa_backends).
single_sequence = "sdpa"  # the trainer sets it from --attention on every model load


def sdpa_backends():
    """The context a forward runs in when single sequences go through SDPA: cuDNN's fused attention first, then flash."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION], set_priority=True)


def register() -> str:
    """Registers the packed attention with transformers (once) and returns its name for `attn_implementation`."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(ATTENTION, packed_attention)
        _registered = True
    return ATTENTION


def _varlen_function():
    """torch's varlen flash attention and how this release asks for causal masking and grouped-query attention: 2.9-2.11
    take `is_causal`, later releases a `window_size` of (-1, 0); `enable_gqa` exists from 2.12 (before it, the key and
    value heads are repeated)."""
    global _varlen
    if _varlen is None:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            _varlen = False
            return _varlen
        params = inspect.signature(varlen_attn).parameters
        causal = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        _varlen = (varlen_attn, causal, "enable_gqa" in params)
    return _varlen


def probe(device: torch.device) -> bool:
    """Whether varlen flash attention runs on this device (a torch build may lack flash attention for a GPU). Called
    once, eagerly, before any forward: a compiled forward must not meet the failure."""
    global _varlen
    if device.type != "cuda" or not _varlen_function():
        return False
    try:
        q = torch.zeros((4, 2, 64), dtype=torch.bfloat16, device=device)
        cu = torch.tensor([0, 2, 4], dtype=torch.int32, device=device)
        _flash_varlen(q.unsqueeze(0).transpose(1, 2), q[:, :1].unsqueeze(0).transpose(1, 2), q[:, :1].unsqueeze(0).transpose(1, 2), cu, 2, None)
    except (RuntimeError, TypeError) as error:
        print(f"trainyard_trainer: varlen flash attention unavailable ({error}); attending per sequence", file=sys.stderr)
        _varlen = False
    return bool(_varlen)


def _flash_varlen(query, key, value, cu, max_len, scaling):
    varlen_attn, causal, gqa = _varlen
    q = query[0].transpose(0, 1)  # [T, H, D]
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    extra = dict(causal)
    if k.shape[1] != q.shape[1]:
        if gqa:
            extra["enable_gqa"] = True
        else:
            repeat = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    out = varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, max_len, max_len, scale=scaling, **extra)
    return out.unsqueeze(0)  # [1, T, H, D]


def _per_sequence(query, key, value, bounds, scaling, repeat_kv=False):
    gqa = key.shape[1] != query.shape[1]
    if gqa and repeat_kv:  # not every SDPA backend (cuDNN) takes grouped key and value heads
        repeat = query.shape[1] // key.shape[1]
        key, value, gqa = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1), False
    outs = [
        F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=scaling, enable_gqa=gqa)
        for a, b in bounds
    ]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out.transpose(1, 2).contiguous()  # [1, T, H, D]


def packed_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract: query [1, H, T, D], key and value [1, H_kv, T, D]; returns
    ([1, T, H, D], None). Without `cu_seq_lens_q` the row is one causal sequence."""
    if attention_mask is not None:
        raise ValueError("packed attention takes no attention mask: pass cu_seq_lens_q/k for packed rows")
    cu = kwargs.get("cu_seq_lens_q")
    total = query.shape[2]
    if cu is None and query.is_cuda and single_sequence == "sdpa":
        return _per_sequence(query, key, value, [(0, total)], scaling, repeat_kv=True), None
    if cu is None:
        cu = torch.tensor([0, total], dtype=torch.int32, device=query.device)
        max_len = total
    else:
        max_len = int(kwargs.get("max_length_q") or total)
    if query.is_cuda and query.dtype in (torch.bfloat16, torch.float16) and _varlen:
        return _flash_varlen(query, key, value, cu, max_len, scaling), None
    offsets = cu.tolist()
    bounds = [(a, b) for a, b in zip(offsets[:-1], offsets[1:]) if b > a]  # empty sequences (graphs' padding) attend to nothing
    return _per_sequence(query, key, value, bounds, scaling), None


@dataclass
class Pack:
    """Sequences forwarded together: `members` index the caller's list, `lengths` their token counts."""

    members: list[int]
    lengths: list[int]

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def plan(lengths: list[int], capacity: int, packing: bool = True) -> list[Pack]:
    """Greedy in order: a pack takes sequences while their tokens fit in `capacity`; a longer sequence goes alone.
    Without packing, one sequence per pack."""
    packs: list[Pack] = []
    for i, n in enumerate(lengths):
        if packs and packing and packs[-1].tokens + n <= capacity:
            packs[-1].members.append(i)
            packs[-1].lengths.append(n)
        else:
            packs.append(Pack([i], [n]))
    return packs
