"""ART unchanged, with the real wandb SDK, against trainyard's W&B surface: ServerlessBackend and
WANDB_BASE_URL both point at one trainyard on loopback, WANDB_API_KEY is a trainyard key, and the worker
runs the reference trainer on the tiny model (engine/tiny_model.py). No engine: nothing here samples.

run.sh runs this directory once with each ART release's venv (0.5.17 on Python 3.11, 0.5.23 on 3.12) in
the same loopback-only namespace as the wandb suite, whose conftest (one level up) sets the SDK's
environment and the socket guard. The stack is started once per session; TINY_MODEL_DIR names a model
directory to reuse across the two runs (built there when missing).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "engine"))

from local_stack import LocalStack, StackError, build_tiny_model, http  # noqa: E402

# litellm (imported by ART) would fetch its model cost map from GitHub.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
TRAINER_PYTHON = os.environ.get("TRAINER_PYTHON", str(ROOT / "trainer/.venv/bin/python"))


class ArtStack(LocalStack):
    entity: str
    key: str
    model_info: dict

    def request(self, method: str, path: str, body=None, *, key: str | None = None):
        """(status, JSON body) of one call with the test user's key (or `key`)."""
        status, _, payload = http(method, f"{self.url}{path}", key or self.key, body)
        return status, payload

    def ok(self, method: str, path: str, body=None):
        status, payload = self.request(method, path, body)
        assert status < 300, f"{method} {path}: {status} {payload}"
        return payload


@pytest.fixture(scope="session")
def art_stack():
    work = Path(tempfile.mkdtemp(prefix="trainyard-wandb-art-"))
    model_dir = Path(os.environ.get("TINY_MODEL_DIR") or work / "tiny-model")
    try:
        if not (model_dir / "tiny-model.json").exists():
            build_tiny_model(TRAINER_PYTHON, model_dir)
        stack = ArtStack(work, model_dir, trainer_python=TRAINER_PYTHON)
        stack.model_info = {}
    except StackError as error:
        pytest.fail(str(error))
    try:
        stack.start_server()
        username = f"art{os.getpid()}"
        stack.entity, stack.key = stack.user(username)
        stack.start_worker(username)
        # What a user sets to keep ART's W&B calls on trainyard.
        os.environ["WANDB_BASE_URL"] = stack.url
        os.environ["WANDB_API_KEY"] = stack.key
        yield stack
    except StackError as error:
        pytest.fail(str(error))
    finally:
        # Runs ART left open (backend.train opens the model's run) are finished while trainyard still answers:
        # at exit, wandb would otherwise retry their last uploads against a stopped server for minutes.
        import wandb

        wandb.teardown()
        for name in ("WANDB_BASE_URL", "WANDB_API_KEY"):
            os.environ.pop(name, None)
        stack.close()


@pytest.fixture(scope="session")
def loop():
    """One event loop for the session: ART's clients keep connections that belong to the loop they were made in."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
