"""A first RL run on one machine: `npm run demo` (which makes the environments, then runs this with ART's venv).

It starts the inference engine on a model directory (a tiny fp32 model built on the fly when none is given),
trainyard (data in data/demo/) and a worker with the reference trainer, then trains an agent written with
ART (0.5.23, unchanged) for a few steps: each step samples groups of answers to one question through
trainyard's gateway, rewards "yes" with 1 and anything else with 0, logs the groups (the web UI's reward
chart) and trains on them. Watch the reward grow at the printed URL. Ctrl-C stops everything it started.

    npm run demo                                   # the tiny model, 6 steps
    npm run demo -- --model-dir /path/to/hf-model --question "..." --steps 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "engine"))

from local_stack import LocalStack, StackError, build_tiny_model, http, say  # noqa: E402

# ART stays off W&B and litellm off its cost-map host.
os.environ.pop("WANDB_API_KEY", None)
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def reward_of(choice) -> float:
    return 1.0 if (choice.message.content or "").lstrip().lower().startswith("yes") else 0.0


async def train(stack: LocalStack, key: str, model_dir: str, question: str, steps: int, groups: int, group_size: int, learning_rate: float) -> None:
    # Imported here, so that `--help` answers from any Python 3 before ART's venv exists (run.sh).
    import art
    from art.serverless.backend import ServerlessBackend

    backend = ServerlessBackend(api_key=key, base_url=stack.v1)
    name = f"yes-agent-{time.strftime('%H%M%S')}"
    model = art.TrainableModel(name=name, run_name=name, project="demo", base_model=model_dir,
                               base_path=str(stack.work / ".art"), report_metrics=[])
    await model.register(backend)
    client = model.openai_client()
    say(f"model registered: open {stack.url}/ui/models/{model.id} (sign in with the key printed above)")

    async def rollout() -> art.Trajectory:
        messages = [{"role": "user", "content": question}]
        completion = await client.chat.completions.create(model=model.get_inference_name(), messages=messages, max_tokens=4, temperature=1.0, logprobs=True)
        choice = completion.choices[0]
        return art.Trajectory(messages_and_choices=[*messages, choice], reward=reward_of(choice))

    for _ in range(steps):
        batch = [art.TrajectoryGroup(await asyncio.gather(*(rollout() for _ in range(group_size)))) for _ in range(groups)]
        rewards = [t.reward for g in batch for t in g.trajectories]
        # ART 0.5.20+ writes model.log() locally only: the groups go to trainyard's log endpoint, which feeds
        # the web UI's reward chart and rollouts pages.
        body = {"split": "train", "trajectory_groups": [g.model_dump(mode="json") for g in batch]}
        status, _, logged = http("POST", f"{stack.v1}/preview/models/{model.id}/log", key, body)
        if status >= 300:
            raise StackError(f"logging the rollouts: {status} {logged}")
        started = time.monotonic()
        result = await backend.train(model, batch, learning_rate=learning_rate)
        say(f"step {result.step}: mean reward of the rollouts it trained on {sum(rewards) / len(rewards):.2f} "
            f"(training took {time.monotonic() - started:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a local Hugging Face model directory (default: build the tiny model)")
    parser.add_argument("--question", help="the prompt (default: the tiny model's yes/no question)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-2, help="default suits the tiny model; use about 1e-5 for a real one")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data/demo", help="trainyard's data directory and the demo's files")
    parser.add_argument("--keep-running", action="store_true", help="leave the stack up after training, until Ctrl-C")
    args = parser.parse_args()
    trainer_python = os.environ.get("TRAINER_PYTHON", str(ROOT / "trainer/.venv/bin/python"))

    work = args.data_dir.resolve()
    model_dir = args.model_dir
    question = args.question
    if model_dir is None:
        model_dir = work / "tiny-model"
        built = model_dir / "tiny-model.json"
        info = json.loads(built.read_text()) if built.exists() else build_tiny_model(trainer_python, model_dir)
        question = question or info["question"]
    if not question:
        parser.error("--question is needed with --model-dir")

    stack = LocalStack(work / "run", model_dir, trainer_python=trainer_python, data_dir=work / "data", port=args.port,
                       server_command=["sh", "-c", "node scripts/build-if-stale.mjs && exec node dist/src/main.js"])
    try:
        stack.start_engine()
        stack.start_server()
        _, key = stack.user("demo")
        stack.start_worker("demo")
        stack.wait_for_engine()
        say(f"up: trainyard {stack.url} (user demo, key {key}), engine {stack.engine_url}; logs in {stack.work}")
        asyncio.run(train(stack, key, str(Path(model_dir).resolve()), question, args.steps, args.groups, args.group_size, args.learning_rate))
        say(f"done: the reward chart is at {stack.url}/ui/ (key {key})")
        if args.keep_running:
            say("still running; Ctrl-C stops it")
            while True:
                time.sleep(3600)
    except StackError as error:
        say(f"failed: {error}")
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        stack.close()


if __name__ == "__main__":
    main()
