"""End to end through trainyard: the server (npx tsx src/main.ts, embedded database in a temporary DATA_DIR), a
trainyard-worker running this trainer as its command, trajectory groups posted through the training API. An RL job
is followed through its events to training_ended and its checkpoint's adapter loads with peft; a job with a refused
config key and one with a malformed input end FAILED with a message that names them."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from tiny import token_choice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_BIN = os.path.join(REPO, "node_modules", ".bin", "tsx")
pytestmark = pytest.mark.skipif(not os.path.exists(NODE_BIN), reason="npm ci has not been run in the repository")


def call(base, key, method, path, body=None):
    request = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"authorization": f"Bearer {key}", **({"content-type": "application/json"} if body is not None else {})})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def spawn(args, env, log):
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def trainyard(tmp_path_factory, model_dir):
    tmp = tmp_path_factory.mktemp("e2e")
    env = {**os.environ, "PORT": "0", "HOST": "127.0.0.1", "DATA_DIR": str(tmp / "data"), "LOG_LEVEL": "warn",
           # The server accepts checkpoints only under these prefixes: the worker's --output-dir below.
           "CHECKPOINT_URI_PREFIXES": f"{tmp / 'adapters'}/"}
    env.pop("DATABASE_URL", None)
    server_log = open(tmp / "server.log", "w+")
    server = spawn([NODE_BIN, "src/main.ts"], env, server_log)
    workers = []
    try:
        deadline = time.time() + 180
        base = None
        while base is None:
            assert server.poll() is None and time.time() < deadline, open(tmp / "server.log").read()[-3000:]
            match = re.search(r"(http://127\.0\.0\.1:\d+)/v1/system-check", open(tmp / "server.log").read())
            base = match.group(1) if match else None
            time.sleep(0.2)
        admin = (tmp / "data" / "admin-api-key").read_text().strip()
        worker_key = call(base, admin, "POST", "/v1/admin/keys", {"username": "admin", "kind": "worker", "name": "e2e"})["key"]
        worker_env = {**os.environ, "TRAINYARD_WORKER_KEY": worker_key, "OMP_NUM_THREADS": "1"}
        command = f"{sys.executable} -m trainyard_trainer --device cpu"
        worker_log = open(tmp / "worker.log", "w+")
        workers.append(spawn([NODE_BIN, "src/worker/main.ts", "--server", base, "--base-models", model_dir, "--concurrency", "2",
                              "--work-dir", str(tmp / "work"), "--output-dir", str(tmp / "adapters"), "--poll-seconds", "1",
                              "--event-window-ms", "50", "--log-level", "warn", "--command", command], worker_env, worker_log))
        yield {"base": base, "key": admin, "tmp": tmp}
    finally:
        for process in workers + [server]:
            stop(process)


def wait_for_end(trainyard, job_id, timeout=420):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = call(trainyard["base"], trainyard["key"], "GET", f"/v1/preview/training-jobs/{job_id}")
        if job["status"] in ("COMPLETED", "FAILED", "CANCELED"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not end; worker log:\n" + open(trainyard["tmp"] / "worker.log").read()[-3000:])


def create(trainyard, model_dir, name, groups, config):
    model = call(trainyard["base"], trainyard["key"], "POST", "/v1/preview/models", {"project": "e2e", "name": name, "base_model": model_dir})
    job = call(trainyard["base"], trainyard["key"], "POST", "/v1/preview/training-jobs",
               {"model_id": model["id"], "trajectory_groups": groups, "experimental_config": config})
    return model["id"], job["id"]


def groups(tokenizer, bad_token=False):
    out = []
    for rewards in ((1, 0, 0, 1), (0, 1, 0, 0)):
        trajectories = []
        for word, reward in zip(["maybe", "yes", "no", "maybe"], rewards):
            choice = token_choice(tokenizer, [word, "<|im_end|>"], [-2.0, -0.3])
            if bad_token:
                choice["logprobs"]["content"][0]["token"] = "token_id:maybe"
            trajectories.append({"messages_and_choices": [{"role": "user", "content": "say one word"}, choice], "reward": reward})
        out.append({"trajectories": trajectories})
    return out


def test_rl_job_through_trainyard_trains_a_loadable_adapter_and_bad_jobs_fail_naming_why(trainyard, model_dir, tokenizer):
    model_id, job_id = create(trainyard, model_dir, "good", groups(tokenizer), {"learning_rate": 1e-4, "loss_fn": "cispo", "epsilon_high": None})
    _, refused_id = create(trainyard, model_dir, "refused", groups(tokenizer), {"learning_rate": 1e-4, "epsilon_lowest": 0.1})
    _, malformed_id = create(trainyard, model_dir, "malformed", groups(tokenizer, bad_token=True), {})

    job = wait_for_end(trainyard, job_id)
    assert job["status"] == "COMPLETED", job
    events = call(trainyard["base"], trainyard["key"], "GET", f"/v1/preview/training-jobs/{job_id}/events?limit=100")["data"]
    types = [e["type"] for e in events]
    assert types[0] == "training_started" and types[-1] == "training_ended"
    assert events[0]["data"]["num_sequences"] == types.count("gradient_step") == 1
    step = next(e for e in events if e["type"] == "gradient_step")["data"]
    assert step["learning_rate"] == 1e-4 and step["grad_norm"] > 0 and step["num_trainable_tokens"] == 16
    [checkpoint] = call(trainyard["base"], trainyard["key"], "GET", f"/v1/preview/models/{model_id}/checkpoints")["data"]
    assert checkpoint["step"] == 1
    assert checkpoint["metrics"]["data/step_num_gradient_steps"] == 1
    adapter = os.path.join(str(trainyard["tmp"]), "adapters", model_id, "step-1")
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= set(os.listdir(adapter))
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), adapter)
    lora_b = [p for n, p in loaded.named_parameters() if "lora_B" in n]
    assert any(float(p.abs().sum()) > 0 for p in lora_b)  # trained: B is no longer zero
    with torch.no_grad():
        assert torch.isfinite(loaded(torch.tensor([[2, 5, 10]])).logits).all()

    refused = wait_for_end(trainyard, refused_id)
    assert refused["status"] == "FAILED" and refused["attempt"] == 1  # exit 3: no retry
    assert "trainyard_trainer: experimental_config.epsilon_lowest is not a key this trainer knows" in refused["error_message"]
    malformed = wait_for_end(trainyard, malformed_id)
    assert malformed["status"] == "FAILED" and malformed["attempt"] == 1
    assert "trainyard_trainer: inputs line 1.trajectories[0].messages_and_choices[1]: malformed token 'token_id:maybe'" in malformed["error_message"]
