"""The real parts of the RL loop, started once for the suite, all on loopback: a tiny fp32 model built here,
the inference engine (engine/serve.sh: vLLM with runtime LoRA), trainyard on a fresh data directory with the
engine in its backends file, and `trainyard-worker` running the reference trainer. Nothing is faked.
engine/local_stack.py starts them (the demo uses it too).

Interpreters: the engine's venv is engine/.venv (ENGINE_VENV overrides), the trainer's trainer/.venv
(TRAINER_PYTHON overrides; it also builds the model). test/realloop/setup.sh makes them all.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "engine"))

from local_stack import LocalStack, StackError, build_tiny_model, http, say  # noqa: E402

TRAINER_PYTHON = os.environ.get("TRAINER_PYTHON", str(ROOT / "trainer/.venv/bin/python"))
SCRATCH = Path(tempfile.mkdtemp(prefix="trainyard-realloop-"))
# ART stays off W&B (no WANDB_API_KEY) and litellm off its cost-map host; HOME is fresh.
for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(name, None)
os.environ.update({
    "HOME": str(SCRATCH / "home"),
    "WANDB_MODE": "disabled",
    "WANDB_ERROR_REPORTING": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "NO_PROXY": "127.0.0.1,localhost",
})
(SCRATCH / "home").mkdir()


class Stack(LocalStack):
    """The stack plus the test user's entity and key, and the tiny model's facts (tiny-model.json)."""

    entity: str
    key: str
    model_info: dict

    def ok(self, method: str, path: str, body=None):
        """A request with the test user's key that must succeed; its JSON body."""
        status, _, payload = http(method, f"{self.url}{path}", self.key, body)
        assert status < 300, f"{method} {path}: {status} {payload}"
        return payload


@pytest.fixture(scope="session")
def stack():
    work = SCRATCH / "stack"
    work.mkdir()
    try:
        model_info = build_tiny_model(TRAINER_PYTHON, work / "tiny-model")
        s = Stack(work, work / "tiny-model", trainer_python=TRAINER_PYTHON)
        s.model_info = model_info
    except StackError as error:
        pytest.fail(str(error))
    try:
        # The engine starts first: it takes longest.
        s.start_engine()
        s.start_server()
        username = f"realloop{os.getpid()}"
        s.entity, s.key = s.user(username)
        s.start_worker(username)
        s.wait_for_engine()
        say("the stack is up")
        yield s
    except StackError as error:
        pytest.fail(str(error))
    finally:
        s.close()
