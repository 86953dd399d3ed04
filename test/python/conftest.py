"""Shared setup of the Python client suites (ART, weave, openai against a real trainyard on loopback).

At import, before any client is imported: a fresh HOME, the environment that keeps the clients off
W&B, PyPI, Sentry and litellm's cost-map host, and a guard on socket connects and name lookups that
refuses and records anything but loopback. Each test fails if the guard refused something, or if weave
logged that it dropped a batch (weave never raises for those).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# ---------------------------------------------------------------------------------------------------
# Environment: a fresh HOME, and every client switch that keeps traffic on loopback.

SCRATCH = Path(tempfile.mkdtemp(prefix="trainyard-pyclients-"))
HOME = SCRATCH / "home"
HOME.mkdir()
CLIENT_ENV = {
    "HOME": str(HOME),
    "XDG_CONFIG_HOME": str(HOME / ".config"),
    "XDG_CACHE_HOME": str(HOME / ".cache"),
    # W&B off: ART only talks to W&B when WANDB_API_KEY is set; these stop the wandb SDK besides.
    "WANDB_MODE": "disabled",
    "WANDB_ERROR_REPORTING": "false",
    "WANDB_CONFIG_DIR": str(HOME / ".config" / "wandb"),
    # litellm (imported by ART) would fetch its model cost map from GitHub.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    # weave's PyPI version check and its Sentry reports have no switch: a dead proxy ends them on
    # loopback, while NO_PROXY keeps trainyard reachable.
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "WEAVE_PRINT_CALL_LINK": "false",
    "WEAVE_USE_SERVER_CACHE": "false",
    "WEAVE_ENABLE_DISK_FALLBACK": "false",
    "WEAVE_RETRY_MAX_ATTEMPTS": "2",
    "WEAVE_RETRY_MAX_INTERVAL": "1",
    "WEAVE_HTTP_TIMEOUT": "20",
}
for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WF_TRACE_SERVER_URL", "WANDB_ENTITY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE"):
    os.environ.pop(name, None)
os.environ.update(CLIENT_ENV)

# The network guard (network_guard.py, installed by importing it): REFUSED records what it refused.

from network_guard import REFUSED  # noqa: E402

# ---------------------------------------------------------------------------------------------------
# weave's silent drops: its batch senders log these (weave/trace_server_bindings/http_utils.py).

DROP_MARKERS = ("dropped", "Error sending")


class _DropRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(marker in message for marker in DROP_MARKERS):
            self.lines.append(f"{record.name}: {message}")


DROPS = _DropRecorder()
logging.getLogger("weave").addHandler(DROPS)


@pytest.fixture(scope="session", autouse=True)
def _no_escape_in_the_background():
    """Background work that outlives a test (weave's version check and Sentry threads, flushes at
    finish) is checked once more when the session ends."""
    yield
    assert REFUSED == [], f"non-loopback network access: {REFUSED}"


@pytest.fixture(autouse=True)
def _no_escape_and_no_drops():
    """Fails the test if the guard refused a connection or weave dropped a batch during it."""
    REFUSED.clear()
    DROPS.lines.clear()
    yield
    assert DROPS.lines == [], f"weave dropped data: {DROPS.lines}"
    assert REFUSED == [], f"non-loopback network access: {REFUSED}"


# ---------------------------------------------------------------------------------------------------
# The stack: fake engine + trainyard + worker with the fixture trainer (test/python/stack.ts).


class Stack:
    def __init__(self, ready: dict[str, Any], process: subprocess.Popen[bytes], work_dir: Path) -> None:
        self.url: str = ready["url"]
        self.v1 = f"{self.url}/v1"
        self.key: str = ready["key"]
        self.admin_key: str = ready["admin_key"]
        self.entity: str = ready["entity"]
        self.username: str = ready["username"]
        self.base_model: str = ready["base_model"]
        self.control_url: str = ready["control_url"]
        self.process = process
        self.work_dir = work_dir

    def request(self, method: str, path: str, body: Any = None, *, key: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """One call to trainyard's HTTP API: (status, parsed JSON or text)."""
        status, raw = self._call(method, path, body, key=key, headers=headers)
        text = raw.decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def raw(self, method: str, path: str, body: Any = None) -> bytes:
        """The bytes of a 200 answer."""
        status, raw = self._call(method, path, body)
        assert status == 200, f"{method} {path}: {status} {raw[:500]!r}"
        return raw

    def _call(self, method: str, path: str, body: Any, *, key: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {key or self.key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with _opener.open(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, answer = self.request(method, path, body, **kwargs)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer

    def jsonl(self, path: str, body: Any) -> list[Any]:
        """A streaming tracing query (JSON lines)."""
        status, answer = self.request("POST", path, body)
        assert status == 200, f"POST {path}: {status} {answer}"
        if isinstance(answer, (dict, list)):
            return [answer]
        return [json.loads(line) for line in answer.splitlines() if line.strip()]

    def engine(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.control_url + path, data=data, method=method)
        with _opener.open(request, timeout=30) as response:
            return json.loads(response.read().decode())


# Loopback needs no proxy, whatever the environment says.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="session")
def stack():
    work_dir = SCRATCH / "stack"
    work_dir.mkdir()
    process = subprocess.Popen(
        ["node", "--import", "tsx", str(HERE / "stack.ts"), str(work_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(work_dir / "stack.log").open("wb"),
        env={"PATH": os.environ["PATH"], "HOME": str(HOME)},
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if not line.startswith('{"ready"'):
        process.wait(timeout=30)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(work_dir.glob("*.log")))
        pytest.fail(f"the stack did not start (exit {process.returncode}): {line}\n{logs}")
    stack = Stack(json.loads(line)["ready"], process, work_dir)
    # weave finds trainyard through these (GraphQL at /graphql, the trace API at /traces).
    os.environ["WANDB_BASE_URL"] = stack.url
    os.environ["WF_TRACE_SERVER_URL"] = f"{stack.url}/traces"
    yield stack
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=60)
