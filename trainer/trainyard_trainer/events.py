"""Event lines on stdout (docs/worker-runtime.md): one JSON object per line, flushed; only rank 0 prints."""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
from typing import Any


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def finite(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def emit(event: dict[str, Any]) -> None:
    if is_main_process():
        print(json.dumps(event, allow_nan=False), flush=True)


# How this job's model was obtained (warm or cold start, loading time), filled in while it loads and carried by
# training_started.
started_info: dict[str, Any] = {}


# Seconds spent in named phases of the current job (saving, say), printed on stderr when it ends (bench/resident.py).
timings: dict[str, float] = {}


@contextlib.contextmanager
def timed(name: str):
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started


def training_started(num_sequences: int, **extra: Any) -> None:
    emit({"type": "training_started", "data": {"num_sequences": num_sequences, **started_info, **extra}})


def gradient_step(data: dict[str, Any]) -> None:
    emit({"type": "gradient_step", "data": finite(data)})


def checkpoint(uri: str, metrics: dict[str, Any]) -> None:
    emit({"type": "checkpoint", "uri": uri, "metrics": finite(metrics)})
