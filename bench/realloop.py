"""One RL step of the real loop, timed and split into its stages (`npm run bench:realloop`).

The stack of the real-loop test (engine/local_stack.py: the vLLM engine, trainyard, trainyard-worker with the
reference trainer) and ART 0.5.23 as the client, on the tiny fp32 model. A warm-up step runs first (the
engine's first LoRA request and the first job pay one-off costs), then STEPS measured steps. Each step is
split into:

  rollouts      the client's GROUPS x GROUP_SIZE chat completions through the gateway
  queue wait    POST /training-jobs until a worker claims the job (the job's created_at .. training_start)
  trainer start the claim until the trainer's training_started line (process start, imports, tokenizing, model load)
  training      training_started .. the last gradient_step line
  saving        the last gradient_step .. the checkpoint line (save_pretrained and the optimizer state)
  job end       the checkpoint line until backend.train returns (the worker's report, ART's 1 s event poll)
  adapter load  the gateway's load of the new checkpoint into the engine (its log line's ms)
  first rollout the first completion on the new checkpoint, the adapter load included

and printed as seconds and as shares of the step (the sum of the stages, adapter load counted inside the
first rollout). The trainer's lines are timed by running it under bench/lib/clock.py, which stamps each
line of its stdout as it passes.

    npm run bench:realloop            # STEPS=2 GROUPS=4 GROUP_SIZE=8 by default
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "engine"))

from local_stack import LocalStack, build_tiny_model, http, say  # noqa: E402

os.environ.pop("WANDB_API_KEY", None)
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import art  # noqa: E402
from art.serverless.backend import ServerlessBackend  # noqa: E402

STEPS = int(os.environ.get("STEPS", "2"))
GROUPS = int(os.environ.get("GROUPS", "4"))
GROUP_SIZE = int(os.environ.get("GROUP_SIZE", "8"))
LEARNING_RATE = 1e-2
STAGES = ["rollouts", "queue wait", "trainer start", "training", "saving", "job end", "first rollout"]


def iso_seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def clock_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def adapter_load_ms(server_log: Path, checkpoint: str) -> float | None:
    for line in server_log.read_text().splitlines():
        if f'"checkpoint":"{checkpoint}"' in line and "an adapter" in line:
            return json.loads(line).get("ms")
    return None


async def main() -> None:
    trainer_python = os.environ.get("TRAINER_PYTHON", str(ROOT / "trainer/.venv/bin/python"))
    work = Path(tempfile.mkdtemp(prefix="trainyard-bench-realloop-"))
    info = build_tiny_model(trainer_python, work / "tiny-model")
    clock = work / "trainer-clock.jsonl"
    stack = LocalStack(work / "stack", work / "tiny-model", trainer_python=trainer_python)
    try:
        stack.start_engine()
        stack.start_server()
        entity, key = stack.user("bench")
        stack.start_worker("bench", [trainer_python, str(ROOT / "bench/lib/clock.py"), str(clock), trainer_python, "-m", "trainyard_trainer"])
        stack.wait_for_engine()

        backend = ServerlessBackend(api_key=key, base_url=stack.v1)
        name = f"bench-{int(time.time())}"
        model = art.TrainableModel(name=name, run_name=name, project="bench", base_model=stack.model_dir, base_path=str(work / ".art"), report_metrics=[])
        await model.register(backend)
        client = model.openai_client()
        messages = [{"role": "user", "content": info["question"]}]

        async def rollout(seed: int, step: int | None = None) -> art.Trajectory:
            completion = await client.chat.completions.create(model=model.get_inference_name(step), messages=messages, max_tokens=1, temperature=1.0, logprobs=True, seed=seed)
            choice = completion.choices[0]
            return art.Trajectory(messages_and_choices=[*messages, choice], reward=1.0 if (choice.message.content or "").lstrip().startswith("yes") else 0.0)

        rows = []
        for index in range(STEPS + 1):
            t0 = time.time()
            groups = [art.TrajectoryGroup(await asyncio.gather(*(rollout(index * 1000 + g * GROUP_SIZE + i) for i in range(GROUP_SIZE)))) for g in range(GROUPS)]
            t1 = time.time()
            before = len(clock_lines(clock))
            await backend.train(model, groups, learning_rate=LEARNING_RATE)
            t2 = time.time()
            step = await model.get_step()
            await rollout(index * 1000 + 999, step)
            t3 = time.time()

            job = http("GET", f"{stack.v1}/preview/training-jobs?model_id={model.id}&limit=1", key)[2]["data"][0]
            lines = clock_lines(clock)[before:]
            started = next(line["t"] for line in lines if line.get("type") == "training_started")
            last_step = [line["t"] for line in lines if line.get("type") == "gradient_step"][-1]
            saved = next(line["t"] for line in lines if line.get("type") == "checkpoint")
            claimed = iso_seconds(job["training_start"])
            created = iso_seconds(job["created_at"])
            load_ms = adapter_load_ms(stack.work / "server.log", f"{entity}/bench/{name}:step{step}")
            row = {
                "rollouts": t1 - t0,
                "queue wait": claimed - created,
                "trainer start": started - claimed,
                "training": last_step - started,
                "saving": saved - last_step,
                "job end": t2 - saved,
                "first rollout": t3 - t2,
                "adapter load": (load_ms or 0.0) / 1000,
            }
            say(f"{'warm-up ' if index == 0 else ''}step {step}: " + ", ".join(f"{k} {v:.2f} s" for k, v in row.items()))
            if index > 0:
                rows.append(row)

        mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
        total = sum(mean[k] for k in STAGES)
        print(f"\nOne RL step of the real loop, tiny fp32 model, {GROUPS}x{GROUP_SIZE} rollouts, mean of {len(rows)} steps after a warm-up:")
        print("| stage | seconds | share of the step |\n|---|---:|---:|")
        for k in STAGES + ["adapter load"]:
            label = "adapter load (inside first rollout)" if k == "adapter load" else k
            print(f"| {label} | {mean[k]:.2f} | {mean[k] / total:.1%} |")
        print(f"| **step** | {total:.2f} | 100% |")
    finally:
        stack.close()


if __name__ == "__main__":
    asyncio.run(main())
