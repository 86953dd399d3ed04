"""ART's README-level workflows with W&B on, against trainyard only: SFT (its data uploaded as a W&B dataset
artifact), metrics logged to the model's W&B run, an RL step with WANDB_API_KEY set (ART then records
provenance on the `latest` lora artifact) and the checkpoint pull helper. ART itself is unchanged; this file
runs once with each tested release (run.sh)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import tarfile
import urllib.request
import uuid
from pathlib import Path

import art
import pytest
import wandb
from art.serverless.backend import ServerlessBackend
from openai.types.chat.chat_completion import ChatCompletionMessage, Choice

# `run_name` is required from ART 0.5.20 on (the name the model is stored and served under), absent before.
HAS_RUN_NAME = "run_name" in inspect.signature(art.TrainableModel).parameters
SFT_ROWS = 6


def new_model(stack, tmp_path: Path, **kwargs) -> art.TrainableModel:
    name = f"agent-{uuid.uuid4().hex[:8]}"
    options = {"name": name, "project": "art-wandb", "base_model": stack.model_dir, "base_path": str(tmp_path / ".art"), **kwargs}
    if HAS_RUN_NAME:
        options["run_name"] = name
    return art.TrainableModel(**options)


def sft_trajectories() -> list[art.Trajectory]:
    question = "Answer with yes or no: is the sky blue?"
    return [
        art.Trajectory(messages_and_choices=[{"role": "user", "content": f"{question} ({i})"}, {"role": "assistant", "content": " yes"}], reward=0.0)
        for i in range(SFT_ROWS)
    ]


def rl_groups() -> list[art.TrajectoryGroup]:
    """Rollouts as a user's code builds them from chat completions, here without an engine and so without
    logprobs: their rewards are equal, so the group teaches nothing and the trainer carries the adapter forward
    to the new step (with rewards that differ, Choices without logprobs fail the job, as ART refuses them)."""

    def trajectory(answer: str, reward: float) -> art.Trajectory:
        choice = Choice(finish_reason="stop", index=0, message=ChatCompletionMessage(role="assistant", content=answer))
        return art.Trajectory(messages_and_choices=[{"role": "user", "content": "yes or no?"}, choice], reward=reward)

    return [art.TrajectoryGroup([trajectory(" yes", 0.5), trajectory(" no", 0.5)])]


def checkpoint_steps(stack, model_id: str) -> list[int]:
    return [c["step"] for c in stack.ok("GET", f"/v1/preview/models/{model_id}/checkpoints")["data"]]


def wandb_history(stack, model: art.TrainableModel) -> list[dict]:
    entity = model.entity or stack.entity
    return [row["values"] for row in stack.ok("GET", f"/v1/preview/wandb-runs/{entity}/{model.project}/{model.name}/history")["history"]]


def adapter_archive(stack, model_id: str, step: int) -> dict[str, bytes]:
    request = urllib.request.Request(f"{stack.url}/v1/preview/models/{model_id}/checkpoints/{step}/archive", headers={"authorization": f"Bearer {stack.key}"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=60) as response:
        data = response.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {member.name.split("/", 1)[-1] if "/" in member.name else member.name: archive.extractfile(member).read() for member in archive.getmembers() if member.isfile()}


@pytest.fixture(scope="module")
def sft(art_stack, loop, tmp_path_factory):
    """One model, registered and fine-tuned once by `model.train_sft`: (model, backend)."""
    backend = ServerlessBackend(api_key=art_stack.key, base_url=art_stack.v1)
    model = new_model(art_stack, tmp_path_factory.mktemp("sft"))
    loop.run_until_complete(model.register(backend))
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        loop.run_until_complete(model.train_sft(sft_trajectories(), art.TrainSFTConfig(batch_size=2, learning_rate=1e-3), verbose=True))
    yield model, backend, said.getvalue()
    loop.run_until_complete(backend.close())


def test_train_sft_uploads_its_data_as_a_dataset_artifact_and_trains_a_new_checkpoint_through_the_worker(art_stack, sft):
    model, _, said = sft
    assert checkpoint_steps(art_stack, model.id) == [1]
    jobs = art_stack.ok("GET", f"/v1/preview/training-jobs?model_id={model.id}")["data"]
    assert [(j["kind"], j["status"]) for j in jobs] == [("sft", "COMPLETED")]

    # The job named the artifact ART uploaded, and that artifact holds the trajectories as ART wrote them.
    # ART prints the URL it sends as the job's training_data_url.
    match = re.search(rf"Artifact URL: wandb-artifact:///{art_stack.entity}/{model.project}/({re.escape(model.name)}-sft-data-[0-9a-f]{{12}}):v0\n", said)
    assert match, said
    artifact = wandb.Api().artifact(f"{art_stack.entity}/{model.project}/{match[1]}:v0", type="dataset")
    assert artifact.metadata == {"format": "jsonl", "num_trajectories": SFT_ROWS}
    lines = Path(artifact.file(root=str(Path(art_stack.work) / match[1]))).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"messages": t.messages()} for t in sft_trajectories()]


def test_model_log_with_wandb_on_makes_the_metrics_readable_through_the_training_api(art_stack, loop, tmp_path):
    # ART 0.5.17 opens a model's W&B run as the process's global run (wandb.init without reinit), and wandb.init
    # then hands that same run to the next model: the SFT model's run, which 0.5.17 opens when its job ends,
    # would take this model's metrics. A script with one model per process never meets this; finish that run.
    if wandb.run is not None:
        wandb.run.finish()
    backend = ServerlessBackend(api_key=art_stack.key, base_url=art_stack.v1)
    model = new_model(art_stack, tmp_path)
    loop.run_until_complete(model.register(backend))
    for step, reward in ((1, 0.25), (2, 0.75)):
        loop.run_until_complete(model.log(metrics={"reward": reward, "loss": 1 - reward}, split="train", step=step))
    # What a script's exit does: the run is finished, and wandb-core sends what it holds (ART 0.5.23 makes
    # its run with reinit="create_new", so wandb.finish() would not reach it).
    model._wandb_run.finish()
    local = [json.loads(line) for line in (Path(model.base_path) / model.project / "models" / model.name / "history.jsonl").read_text().splitlines()]
    logged = wandb_history(art_stack, model)
    assert [row["training_step"] for row in logged] == [1, 2]
    assert [row["train/reward"] for row in logged] == [0.25, 0.75]
    # The W&B run holds what ART wrote to its own history file, key for key (the file adds `step`, W&B its `_` keys).
    for row, mine in zip(logged, local):
        assert {k: v for k, v in row.items() if not k.startswith("_")} == {k: v for k, v in mine.items() if k not in ("recorded_at", "step") and not k.startswith("_")}
    loop.run_until_complete(backend.close())


def test_backend_train_with_wandb_api_key_set_runs_to_the_next_checkpoint(art_stack, loop, sft):
    model, backend, _ = sft
    result = loop.run_until_complete(backend.train(model, rl_groups(), learning_rate=1e-5))
    assert result.step == 2
    assert checkpoint_steps(art_stack, model.id) == [1, 2]


def test_the_pull_helper_downloads_a_checkpoint_whose_files_equal_the_adapters(art_stack, loop, sft, tmp_path):
    model, backend, _ = sft
    pulled = Path(loop.run_until_complete(backend._experimental_pull_model_checkpoint(model, step=1, local_path=str(tmp_path / "pulled"))))
    files = {str(p.relative_to(pulled)): p.read_bytes() for p in pulled.rglob("*") if p.is_file()}
    assert "adapter_model.safetensors" in files
    assert files == adapter_archive(art_stack, model.id, 1)
