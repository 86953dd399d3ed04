"""The resident trainer: one process serves job after job for trainyard-worker, so the base model is loaded once
(docs/worker-runtime.md, "Resident trainers").

The worker offers residency with TRAINYARD_RESIDENT=1. The first job's spec path comes as usual (last argument);
after each job the process prints {"type":"job_end","spec_path":...,"exit_code":0|3,...} and reads the next job
from stdin as {"type":"job","spec_path":...}; end-of-file on stdin means no more jobs.

Isolation between jobs, which may belong to other models and tenants: the LoRA is removed from the base model after
every job that does not continue from the checkpoint this process saved last; the optimizer is new for every job and
its state comes from the checkpoint's file unless that checkpoint is the very files this process wrote (same inode,
size and modification time: identity, never the path alone); torch's RNG is seeded from the job's seed as a fresh
process seeds it; a failed job drops the adapter and its state whatever happened."""
from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from . import events
from .config import ConfigError
from .model import ADAPTER_FILES, OPTIMIZER_FILE, Options, attach_lora, load_base, load_optimizer_state, load_tokenizer

OFFER_ENV = "TRAINYARD_RESIDENT"


def offered() -> bool:
    """Residency is the worker's offer (it writes further jobs to stdin) and needs one process: under torchrun every
    rank would have to be handed each job, so several processes keep to one job per process."""
    return os.environ.get(OFFER_ENV) == "1" and int(os.environ.get("WORLD_SIZE", "1")) == 1


def checkpoint_identity(directory: str) -> tuple | None:
    """What the checkpoint's files are, not what they are called: device, inode, size and mtime of each file. A file
    rewritten, replaced or missing changes it."""
    parts = []
    for name in (*ADAPTER_FILES, OPTIMIZER_FILE):
        try:
            st = os.stat(os.path.join(directory, name))
        except FileNotFoundError:
            if name == OPTIMIZER_FILE:
                continue
            return None
        parts.append((name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(parts)


@dataclass
class _Saved:
    identity: tuple
    kind: str
    state: dict[str, Any]


class ResidentSource:
    """The model source of a resident process: the base model and its tokenizer stay loaded while jobs use the same
    base model on the same device; the adapter in memory is reused only for the checkpoint this process saved last."""

    def __init__(self) -> None:
        self.base_model: str | None = None
        self.device: torch.device | None = None
        self.base: Any = None
        self.peft: Any = None
        self._tokenizer: Any = None
        self.last: _Saved | None = None
        self.reused: str | None = None  # the adapter directory this job continues from memory

    # -- one job ------------------------------------------------------------------------------------------------
    def begin(self, base_model: str, device: torch.device) -> None:
        """Makes `base_model` resident (replacing another one) and records how the job started."""
        started = time.perf_counter()
        warm = self.base is not None and self.base_model == base_model and self.device == device
        if not warm:
            self.release()
            self._tokenizer = load_tokenizer(base_model)
            self.base = load_base(base_model, device)
            self.base_model, self.device = base_model, device
        self.reused = None
        events.started_info.clear()
        events.started_info.update(start="warm" if warm else "cold", load_seconds=time.perf_counter() - started)

    def end(self, ok: bool) -> None:
        """After a job: a failed one leaves nothing behind (its adapter may be half-trained, a KL reference loaded)."""
        if not ok:
            self.drop_adapter()
        events.started_info.clear()

    def release(self) -> None:
        """Forgets everything, the base model included."""
        self.drop_adapter()
        self.base = self._tokenizer = self.base_model = self.device = None
        _free_memory()

    def drop_adapter(self) -> None:
        if self.peft is not None:
            self.base = self.peft.unload()  # the base layers back in place of the LoRA layers, weights untouched
            self.peft = None
            # A full collection costs about 0.4 s with torch loaded on a busy 2-core machine: only when something
            # big was let go, never between the jobs that continue one model.
            _free_memory()
        self.last = None
        self.reused = None

    # -- the source interface (source.ColdSource) ----------------------------------------------------------------
    def tokenizer(self, base_model: str) -> Any:
        self._check(base_model)
        return self._tokenizer

    def vocab_size(self, base_model: str) -> int:
        self._check(base_model)
        return self.base.get_input_embeddings().num_embeddings

    def model(self, base_model: str, adapter_dir: str | None, options: Options, device: torch.device) -> Any:
        self._check(base_model)
        started = time.perf_counter()
        if adapter_dir is not None and self.peft is not None and self.last is not None and self.last.identity == checkpoint_identity(adapter_dir):
            for p in self.peft.parameters():
                p.grad = None
            self.peft.set_adapter("default")
            self.peft.train()
            self.reused = adapter_dir
            adapter = "memory"
        else:
            self.drop_adapter()
            try:
                self.peft = attach_lora(self.base, base_model, adapter_dir, options, device)
            except ConfigError:
                # An adapter that failed to load may have left LoRA layers in the base model: the next job loads it anew.
                self.release()
                raise
            adapter = "new" if adapter_dir is None else "disk"
        torch.manual_seed(options.seed)
        events.started_info["adapter"] = adapter
        events.started_info["load_seconds"] = events.started_info.get("load_seconds", 0.0) + time.perf_counter() - started
        return self.peft

    def optimizer_state(self, adapter_dir: str | None, kind: str) -> dict[str, Any] | None:
        if adapter_dir is not None and adapter_dir == self.reused and self.last is not None:
            return self.last.state if self.last.kind == kind else None
        started = time.perf_counter()
        state = load_optimizer_state(adapter_dir, kind)
        events.started_info["load_seconds"] = events.started_info.get("load_seconds", 0.0) + time.perf_counter() - started
        return state

    def saved(self, model: Any, output_dir: str, optimizer_state: dict[str, Any] | None) -> None:
        identity = checkpoint_identity(output_dir)
        if model is not self.peft or identity is None or optimizer_state is None:
            self.last = None
            return
        self.last = _Saved(identity, optimizer_state["kind"], optimizer_state["state"])

    def _check(self, base_model: str) -> None:
        if self.base is None or base_model != self.base_model:
            raise RuntimeError(f"resident trainer: job asks for {base_model!r} but {self.base_model!r} was made resident")


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peak_memory(device: torch.device | None) -> dict[str, int]:
    usage = {"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}  # Linux reports KiB
    if device is not None and device.type == "cuda":
        usage["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return usage


def next_job(stream=None) -> str | None:
    """The next job's spec path from stdin, or None at end-of-file (the worker is done with this process)."""
    line = (stream or sys.stdin).readline()
    if not line:
        return None
    message = json.loads(line)
    if not isinstance(message, dict) or message.get("type") != "job" or not isinstance(message.get("spec_path"), str):
        raise ValueError(f"resident trainer: expected {{\"type\":\"job\",\"spec_path\":...}} on stdin, got {line.strip()[:200]!r}")
    return message["spec_path"]


def job_end(spec_path: str, exit_code: int, device: torch.device | None) -> None:
    """On stderr first, then stdout: the worker reads the two pipes apart and ends the job once it has both, so that
    all of the job's stderr (a permanent failure's reason) is counted as the job's."""
    line = json.dumps({"type": "job_end", "spec_path": spec_path, "exit_code": exit_code, **peak_memory(device)})
    print(line, file=sys.stderr, flush=True)
    print(line, flush=True)
