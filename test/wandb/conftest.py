"""The wandb SDK suite's setup: a real trainyard (with a worker and the recording trainer) on loopback,
the SDK pointed at it by WANDB_BASE_URL and a trainyard key as WANDB_API_KEY.

run.sh starts pytest in a network namespace that has only loopback, so neither Python nor wandb-core
(the SDK's Go process) can reach anything else; the socket guard (test/python/network_guard.py) also
fails a test whose Python side tried to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRATCH = Path(tempfile.mkdtemp(prefix="trainyard-wandb-"))
HOME = SCRATCH / "home"
HOME.mkdir()
os.environ.update(
    {
        "HOME": str(HOME),
        "WANDB_MODE": "online",
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DIR": str(SCRATCH / "wandb"),
        "WANDB_CACHE_DIR": str(SCRATCH / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(SCRATCH / "wandb-config"),
        "WANDB_DATA_DIR": str(SCRATCH / "wandb-data"),
        "WANDB_ARTIFACT_DIR": str(SCRATCH / "wandb-artifacts"),
        "NO_PROXY": "127.0.0.1,localhost",
    }
)
for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ENTITY", "WANDB_PROJECT", "HTTP_PROXY", "HTTPS_PROXY"):
    os.environ.pop(name, None)

# The Python suites' network guard (test/python/network_guard.py), installed by importing it.
sys.path.insert(0, str(ROOT / "test" / "python"))
from network_guard import REFUSED  # noqa: E402


@pytest.fixture(autouse=True)
def _loopback_only():
    REFUSED.clear()
    yield
    assert REFUSED == [], f"non-loopback network access: {REFUSED}"


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Stack:
    def __init__(self, ready: dict[str, Any]) -> None:
        self.url: str = ready["url"]
        self.key: str = ready["key"]
        self.admin_key: str = ready["admin_key"]
        self.entity: str = ready["entity"]
        self.base_model: str = ready["base_model"]
        self.control_url: str = ready["control_url"]

    def request(self, method: str, path: str, body: Any = None, *, key: str | None = None, raw: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(path if path.startswith("http") else self.url + path, data=data, method=method)
        if key != "":
            request.add_header("Authorization", f"Bearer {key or self.key}")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with _opener.open(request, timeout=60) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, payload

    def wait_for_job(self, job_id: str, timeout: float = 120) -> dict[str, Any]:
        """The job once it has ended (or as it stands when the timeout passes)."""
        deadline = time.monotonic() + timeout
        while True:
            _, state = self.request("GET", f"/v1/preview/training-jobs/{job_id}")
            if state["status"] in ("COMPLETED", "FAILED", "CANCELED") or time.monotonic() > deadline:
                return state
            time.sleep(0.5)

    def new_user(self, name: str) -> str:
        """A second tenant: a user of its own and its key."""
        self.request("POST", "/v1/admin/users", {"username": name}, key=self.admin_key)
        status, answer = self.request("POST", "/v1/admin/keys", {"username": name}, key=self.admin_key)
        assert status == 201, answer
        return answer["key"]


@pytest.fixture(scope="session")
def stack():
    work_dir = SCRATCH / "stack"
    work_dir.mkdir()
    process = subprocess.Popen(
        ["node", "--import", "tsx", str(ROOT / "test/python/stack.ts"), str(work_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(work_dir / "stack.log").open("wb"),
        env={"PATH": os.environ["PATH"], "HOME": str(HOME)},
    )
    assert process.stdout is not None and process.stdin is not None
    line = process.stdout.readline().decode()
    if not line.startswith('{"ready"'):
        process.wait(timeout=30)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(work_dir.glob("*.log")))
        pytest.fail(f"the stack did not start (exit {process.returncode}): {line}\n{logs}")
    stack = Stack(json.loads(line)["ready"])
    os.environ["WANDB_BASE_URL"] = stack.url
    os.environ["WANDB_API_KEY"] = stack.key
    yield stack
    process.stdin.close()
    process.wait(timeout=60)
