"""Event lines on stdout (docs/worker-runtime.md): one JSON object per line, flushed; only rank 0 prints."""
from __future__ import annotations

import json
import math
import os
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


def training_started(num_sequences: int, **extra: Any) -> None:
    emit({"type": "training_started", "data": {"num_sequences": num_sequences, **started_info, **extra}})


def gradient_step(data: dict[str, Any]) -> None:
    emit({"type": "gradient_step", "data": finite(data)})


def checkpoint(uri: str, metrics: dict[str, Any]) -> None:
    emit({"type": "checkpoint", "uri": uri, "metrics": finite(metrics)})
