"""Causal attention of one sequence, forward + backward, bf16 on CUDA: the trainer's varlen flash attention (the kernel
of packed rows) against scaled_dot_product_attention held to each of its backends, at the attention shapes of the
trainer bench (Qwen2.5-0.5B at 4k, 1.5B at 8k) and an 8B shape at 8k. Prints one JSON line per shape: milliseconds and
TFLOP/s (causal forward 2·T²·H·D, backward 2.5 times that) for each kernel.

    trainer/.venv/bin/python bench/attention.py      # needs CUDA
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainyard_trainer import packing  # noqa: E402

SHAPES = ((4096, 14, 2, 64), (8192, 12, 2, 128), (8192, 32, 8, 128))  # tokens, query heads, key/value heads, head dim


def milliseconds(fn, warmup: int = 3, runs: int = 10) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / runs


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("bench/attention.py needs CUDA")
    packing.probe(torch.device("cuda"))
    for tokens, heads, kv_heads, dim in SHAPES:
        def tensor(h: int) -> torch.Tensor:
            return torch.randn(1, h, tokens, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)

        q, k, v = tensor(heads), tensor(kv_heads), tensor(kv_heads)
        grad = torch.randn(1, tokens, heads, dim, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, tokens], dtype=torch.int32, device="cuda")

        def varlen():
            packing._flash_varlen(q, k, v, cu, tokens, None).backward(grad)

        def sdpa(backend):
            def run():
                kk, vv = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
                out.transpose(1, 2).backward(grad)
            return run

        flops = 2 * tokens * tokens * heads * dim * 3.5
        row = {"bench": "attention", "tokens": tokens, "heads": heads, "kv_heads": kv_heads, "head_dim": dim}
        kernels = (("varlen_flash", varlen), ("sdpa_cudnn", sdpa(SDPBackend.CUDNN_ATTENTION)),
                   ("sdpa_flash", sdpa(SDPBackend.FLASH_ATTENTION)), ("sdpa_efficient", sdpa(SDPBackend.EFFICIENT_ATTENTION)))
        for name, fn in kernels:
            try:
                ms = milliseconds(fn)
                row[name] = {"ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1)}
            except RuntimeError as error:  # a backend this build or GPU lacks
                row[name] = f"unavailable: {str(error)[:120]}"
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
