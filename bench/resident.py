"""Resident trainer benchmark: N consecutive RL jobs of one model (each continuing from the last checkpoint), run by a
new trainer process per job (the baseline, `--resident off`) and by one resident trainer, in the same run.

    npm run bench:resident                     # CPU, tiny random Llama, through trainyard + trainyard-worker
    trainer/.venv/bin/python bench/resident.py --shape qwen2.5-0.5b --device cuda --seq-len 1024
                                               # GPU: a Qwen2.5-0.5B-shaped model, random weights, nothing downloaded
    ... --via direct                           # without Node: this script speaks the worker's protocol to the trainer

`--via worker` (default) starts trainyard (`src/main.ts`, embedded database in a temporary directory) and
`trainyard-worker`, posts each job through the training API once the previous one completed, and times each job from
the worker's "job claimed" to its "job completed" log lines. `--via direct` runs the trainer command itself: a process
per job, or one process fed job after job on stdin, timed from start (or hand-over) to exit (or job_end).

Prints one JSON line per job: wall time, the time in gradient steps (Σ num_tokens / tokens_per_second of its
gradient_step events) and in saving the adapter (the trainer's `timings` line), the overhead (the rest) and each
share; then one line per mode with the median over jobs 2..N and one with the ratios resident / per-process.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from trainer import SHAPES, build, groups  # noqa: E402  (bench/trainer.py: random models from a config, RL inputs)

TSX = os.path.join(REPO, "node_modules", ".bin", "tsx")
TIMINGS = re.compile(r"trainyard_trainer: timings (\{.*\})")


def trainer_command(args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "trainyard_trainer", "--device", args.device]


def trainer_env(args: argparse.Namespace) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(REPO, "trainer"), os.environ.get("PYTHONPATH")]))}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    env.pop("TRAINYARD_RESIDENT", None)
    return env


def record(mode: str, n: int, wall: float, steps: list[dict], timings: dict, started: dict) -> dict:
    """`timings`: the trainer's own (job_seconds: its job from reading the spec to the checkpoint line, save_seconds)."""
    gradient = sum(s["num_tokens"] / s["tokens_per_second"] for s in steps if s.get("tokens_per_second"))
    save, job = timings.get("save_seconds", 0.0), timings.get("job_seconds", 0.0)
    overhead = wall - gradient - save
    return {"bench": "resident", "mode": mode, "job": n, "wall_s": round(wall, 3), "gradient_s": round(gradient, 3), "save_s": round(save, 3),
            "overhead_s": round(overhead, 3), "gradient_share": round(gradient / wall, 3), "save_share": round(save / wall, 3),
            # The overhead split: outside the trainer's job (process start and imports, or the hand-over; the worker's
            # downloads and reports), and inside it (loading, tokenizing, packing, no-grad passes).
            "outside_trainer_job_s": round(wall - job, 3), "trainer_job_other_s": round(job - gradient - save, 3),
            "start": started.get("start", "cold"), "load_s": round(started["load_seconds"], 3) if "load_seconds" in started else None}


def trainer_timings(text: str) -> dict:
    timings: dict[str, float] = {}
    for match in TIMINGS.finditer(text):
        for key, value in json.loads(match.group(1)).items():
            timings[key] = timings.get(key, 0.0) + value
    return timings


# -- through trainyard and trainyard-worker ------------------------------------------------------------------------------
def call(base: str, key: str, method: str, path: str, body=None):
    request = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"authorization": f"Bearer {key}", **({"content-type": "application/json"} if body is not None else {})})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def via_worker(args: argparse.Namespace, model_dir: str, data: list[dict], work: str) -> list[dict]:
    env = {**os.environ, "PORT": "0", "HOST": "127.0.0.1", "DATA_DIR": os.path.join(work, "data"), "LOG_LEVEL": "warn",
           "CHECKPOINT_URI_PREFIXES": os.path.join(work, "adapters") + "/"}
    env.pop("DATABASE_URL", None)
    server_log = os.path.join(work, "server.log")
    server = subprocess.Popen([TSX, "src/main.ts"], cwd=REPO, env=env, stdout=open(server_log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    records = []
    try:
        deadline, base = time.time() + 180, None
        while base is None:
            if server.poll() is not None or time.time() > deadline:
                raise SystemExit("trainyard did not start:\n" + open(server_log).read()[-3000:])
            match = re.search(r"(http://127\.0\.0\.1:\d+)/v1/system-check", open(server_log).read())
            base = match.group(1) if match else None
            time.sleep(0.2)
        admin = open(os.path.join(work, "data", "admin-api-key")).read().strip()
        worker_key = call(base, admin, "POST", "/v1/admin/keys", {"username": "admin", "kind": "worker", "name": "bench"})["key"]
        for mode, resident in (("per_process", "off"), ("resident", "on")):
            model = call(base, admin, "POST", "/v1/preview/models", {"project": "bench", "name": f"resident-{mode}", "base_model": model_dir})
            log_path = os.path.join(work, f"worker-{mode}.log")
            worker = subprocess.Popen(
                [TSX, "src/worker/main.ts", "--server", base, "--base-models", model_dir, "--work-dir", os.path.join(work, "work"),
                 "--output-dir", os.path.join(work, "adapters"), "--poll-seconds", "1", "--event-window-ms", "50", "--log-level", "info",
                 "--resident", resident, "--", *trainer_command(args)],
                cwd=REPO, env={**trainer_env(args), "TRAINYARD_WORKER_KEY": worker_key}, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                start_new_session=True)
            jobs = []
            try:
                for _ in range(args.jobs):
                    job = call(base, admin, "POST", "/v1/preview/training-jobs",
                               {"model_id": model["id"], "trajectory_groups": data, "experimental_config": {"learning_rate": 1e-5}})
                    while (status := call(base, admin, "GET", f"/v1/preview/training-jobs/{job['id']}"))["status"] not in ("COMPLETED", "FAILED", "CANCELED"):
                        time.sleep(0.1)
                    if status["status"] != "COMPLETED":
                        raise SystemExit(f"job {job['id']} ended {status['status']}: {status.get('error_message')}")
                    jobs.append(job["id"])
            finally:
                stop(worker)
            lines = [json.loads(line) for line in open(log_path) if line.startswith("{")]
            for n, job_id in enumerate(jobs, 1):
                mine = [line for line in lines if line.get("job_id") == job_id]
                claimed = next(line["time"] for line in mine if line.get("msg") == "job claimed")
                completed = next(line["time"] for line in mine if line.get("msg") == "job completed")
                timings = trainer_timings("\n".join(line.get("msg", "") for line in mine if line.get("source") == "trainer"))
                events = call(base, admin, "GET", f"/v1/preview/training-jobs/{job_id}/events?limit=100")["data"]
                steps = [e["data"] for e in events if e["type"] == "gradient_step"]
                started = next((e["data"] for e in events if e["type"] == "training_started"), {})
                records.append(record(mode, n, (completed - claimed) / 1000, steps, timings, started))
                print(json.dumps(records[-1]), flush=True)
    finally:
        stop(server)
    return records


# -- the trainer command alone, as the worker runs it --------------------------------------------------------------------
def write_spec(work: str, mode: str, n: int, model_dir: str, data: list[dict], base: str | None) -> tuple[str, str]:
    job = os.path.join(work, mode, f"job-{n}")
    out = os.path.join(work, mode, "adapters", f"step-{n}")
    os.makedirs(job)
    os.makedirs(out)
    with open(os.path.join(job, "inputs.jsonl"), "w") as f:
        f.writelines(json.dumps(g) + "\n" for g in data)
    spec = {"spec_version": 1, "job": {"id": f"{mode}-{n}", "kind": "rl", "attempt": 1},
            "model": {"id": mode, "entity": "bench", "project": "bench", "name": mode, "base_model": model_dir},
            "base_checkpoint": None if base is None else {"id": f"{mode}-{n - 1}", "step": n - 1, "uri": base}, "base_checkpoint_uri": base,
            "target_step": n, "config": {"experimental_config": {"learning_rate": 1e-5}}, "inputs_path": os.path.join(job, "inputs.jsonl"),
            "num_inputs": len(data), "output_dir": out, "worker_id": "bench"}
    path = os.path.join(job, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path, out


def read_job(process: subprocess.Popen) -> tuple[list[dict], bool]:
    """The event lines of one job, until job_end (True) or the end of the output (False)."""
    events = []
    for line in process.stdout:
        if line.startswith("{"):
            events.append(json.loads(line))
            if events[-1]["type"] == "job_end":
                return events, True
    return events, False


def via_direct(args: argparse.Namespace, model_dir: str, data: list[dict], work: str) -> list[dict]:
    records = []
    for mode in ("per_process", "resident"):
        env = trainer_env(args)
        if mode == "resident":
            env["TRAINYARD_RESIDENT"] = "1"
        base, process = None, None
        stderr_path = os.path.join(work, f"{mode}.stderr")
        try:
            for n in range(1, args.jobs + 1):
                spec, out = write_spec(work, mode, n, model_dir, data, base)
                stderr_at = os.path.getsize(stderr_path) if os.path.exists(stderr_path) else 0
                started = time.perf_counter()
                if process is None:
                    process = subprocess.Popen([*trainer_command(args), spec], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=open(stderr_path, "a"), text=True)
                else:
                    process.stdin.write(json.dumps({"type": "job", "spec_path": spec}) + "\n")
                    process.stdin.flush()
                events, resident = read_job(process)
                if not resident:
                    code = process.wait()
                    process = None
                    if code != 0:
                        raise SystemExit(f"trainer exited {code}:\n" + open(stderr_path).read()[-3000:])
                wall = time.perf_counter() - started
                with open(stderr_path) as f:
                    f.seek(stderr_at)
                    timings = trainer_timings(f.read())
                steps = [e["data"] for e in events if e["type"] == "gradient_step"]
                started_data = next((e["data"] for e in events if e["type"] == "training_started"), {})
                records.append(record(mode, n, wall, steps, timings, started_data))
                if resident:  # the resident trainer's memory peaks so far, from its job_end line
                    end = events[-1]
                    records[-1]["peak_rss_mib"] = round(end["max_rss_bytes"] / 2**20, 1)
                    if "cuda_max_allocated_bytes" in end:
                        records[-1]["cuda_peak_allocated_gib"] = round(end["cuda_max_allocated_bytes"] / 2**30, 3)
                print(json.dumps(records[-1]), flush=True)
                base = out
        finally:
            if process is not None:
                process.stdin.close()
                process.wait(timeout=120)
    return records


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--via", choices=("worker", "direct"), default="worker")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128, help="prompt + completion tokens per trajectory")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the trainer (0: torch's default)")
    args = parser.parse_args()
    if args.via == "worker" and not os.path.exists(TSX):
        raise SystemExit("--via worker needs npm ci in the repository (node_modules/.bin/tsx); --via direct does not")
    with tempfile.TemporaryDirectory() as work:
        model_dir = os.path.join(work, "model")
        build(model_dir, args.shape)
        data = groups(SHAPES[args.shape][5], args.groups, args.group_size, args.seq_len, variable=False)
        records = (via_worker if args.via == "worker" else via_direct)(args, model_dir, data, work)
    summary = {}
    for mode in ("per_process", "resident"):
        later = [r for r in records if r["mode"] == mode and r["job"] > 1]
        keys = ("wall_s", "gradient_s", "save_s", "overhead_s", "outside_trainer_job_s", "trainer_job_other_s")
        summary[mode] = {key: round(statistics.median(r[key] for r in later), 3) for key in keys}
        print(json.dumps({"bench": "resident", "summary": mode, "via": args.via, "shape": args.shape, "device": args.device,
                          "jobs": args.jobs, "median_of_jobs_2_on": summary[mode]}), flush=True)
    ratio = {key: round(summary["resident"][key] / summary["per_process"][key], 3) for key in ("wall_s", "overhead_s")}
    print(json.dumps({"bench": "resident", "ratio": "resident / per_process", **ratio}), flush=True)


if __name__ == "__main__":
    main()
