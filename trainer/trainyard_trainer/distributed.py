"""Several processes (torchrun / accelerate launch): each rank trains one packed row of a gradient step; the LoRA
gradients (small) and the step's sums are all-reduced, so every rank takes the same optimizer step. With one
process every function here is a no-op."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def init(device: torch.device) -> None:
    if world_size() > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")


def all_reduce_sums(sums: dict[str, float], params: list[torch.nn.Parameter]) -> dict[str, float]:
    if world_size() == 1:
        return sums
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
    keys = sorted(sums)
    values = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=params[0].device)
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return dict(zip(keys, values.tolist()))


def barrier() -> None:
    if world_size() > 1 and dist.is_initialized():
        dist.barrier()


def close() -> None:
    """Ends the process group once the job is done, before the interpreter exits: gloo's worker threads left to the
    interpreter's end can abort the process ("terminate called without an active exception", SIGABRT; seen once in
    CI, and pytorch/pytorch#190489)."""
    if dist.is_initialized():
        dist.destroy_process_group()
