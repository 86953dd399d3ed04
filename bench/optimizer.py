"""The optimizer step alone: clip + AdamW over the LoRA tensors of a model shape (r 8 on the seven projections of every
layer, as the trainer makes them), torch's default AdamW against the fused one (`--adamw`), in the same run.

    trainer/.venv/bin/python bench/optimizer.py                      # CPU, Qwen2.5-0.5B's LoRA (336 tensors)
    trainer/.venv/bin/python bench/optimizer.py --device cuda --shape qwen2.5-1.5b

Prints one JSON line per implementation: milliseconds per step (the median of --steps, after warm-up) and its ratio
to the default one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from trainer import SHAPES  # bench/trainer.py, beside this file
from trainyard_trainer.rl import MAX_GRAD_NORM, make_optimizer


def lora_tensors(shape: str, rank: int, device: torch.device) -> list[torch.nn.Parameter]:
    hidden, inter, layers, heads, kv, _ = SHAPES[shape]
    kv_out = hidden // heads * kv
    projections = [(hidden, hidden), (hidden, kv_out), (hidden, kv_out), (hidden, hidden), (hidden, inter), (hidden, inter), (inter, hidden)]
    gen = torch.Generator().manual_seed(0)
    params = []
    for _ in range(layers):
        for fan_in, fan_out in projections:
            for size in ((rank, fan_in), (fan_out, rank)):
                p = torch.nn.Parameter(torch.randn(size, generator=gen).to(device) * 0.01)
                p.grad = torch.randn(size, generator=gen).to(device)
                params.append(p)
    return params


def time_steps(params: list[torch.nn.Parameter], fused: bool, steps: int, device: torch.device) -> float:
    optimizer = make_optimizer(params, 1e-5, 0.1, fused)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for k in range(steps + 3):  # three steps of warm-up: state allocation, kernel loading
        sync()
        started = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        sync()
        if k >= 3:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    params = lora_tensors(args.shape, args.rank, device)
    elements = sum(p.numel() for p in params)
    results = {}
    for name, fused in (("default", False), ("fused", True)):
        results[name] = time_steps(params, fused, args.steps, device)
        print(json.dumps({"bench": "optimizer", "measure": name, "shape": args.shape, "device": args.device, "tensors": len(params),
                          "elements": elements, "ms_per_step": round(results[name] * 1e3, 3),
                          "ratio_to_default": round(results["default"] / results[name], 2)}), flush=True)


if __name__ == "__main__":
    main()
