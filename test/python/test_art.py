"""ART (openpipe-art 0.5.17, the newest release that installs on Python 3.11), unchanged, against
trainyard's training API: ServerlessBackend pointed at loopback, W&B switched off (no WANDB_API_KEY)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import types
import uuid
from pathlib import Path

import art
import openai
import pytest
from art.serverless.backend import ServerlessBackend

# What the newest ART releases add to every rollout (0.5.19+): token ids for training without re-tokenizing.
NEWEST_ART_EXTRA_BODY = {"return_token_ids": True, "return_tokens_as_token_ids": True, "chat_template_kwargs": {"preserve_thinking": True}}


@pytest.fixture
def wandb_stub(monkeypatch):
    """ART 0.5.17 runs `import wandb` in backend.train before it checks WANDB_API_KEY, so the import must
    work with W&B off. The suites do not install wandb (weave would then use it): a module that fails on
    any use stands in, for the ART tests only."""
    stub = types.ModuleType("wandb")

    def refuse(name: str):
        raise RuntimeError(f"wandb.{name} used by ART although W&B is switched off")

    stub.__getattr__ = refuse  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "wandb", stub)


def new_model(stack, tmp_path: Path, **kwargs) -> art.TrainableModel:
    options = {
        "name": f"agent-{uuid.uuid4().hex[:8]}",
        "project": "art-py",
        "base_model": stack.base_model,
        "base_path": str(tmp_path / ".art"),
        "report_metrics": [],
        **kwargs,
    }
    return art.TrainableModel(**options)


def backend_for(stack, key: str | None = None) -> ServerlessBackend:
    return ServerlessBackend(api_key=key or stack.key, base_url=stack.v1)


async def rollout(model: art.TrainableModel, prompt: str, reward: float) -> art.Trajectory:
    messages = [{"role": "user", "content": prompt}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=3, logprobs=True, extra_body=NEWEST_ART_EXTRA_BODY
    )
    return art.Trajectory(messages_and_choices=[*messages, completion.choices[0]], reward=reward)


async def rollout_groups(model: art.TrainableModel) -> list[art.TrajectoryGroup]:
    return [
        art.TrajectoryGroup(await asyncio.gather(*(rollout(model, f"{prompt} #{i}", reward) for i, reward in enumerate((0.0, 1.0)))))
        for prompt in ("say yes", "say no")
    ]


def checkpoint_steps(stack, model_id: str) -> list[int]:
    return [c["step"] for c in stack.ok("GET", f"/v1/preview/models/{model_id}/checkpoints")["data"]]


@pytest.mark.usefixtures("wandb_stub")
def test_register_rollout_train_log_serve_and_delete(stack, tmp_path):
    async def scenario():
        backend = backend_for(stack)
        model = new_model(stack, tmp_path)
        await model.register(backend)
        assert model.id is not None
        assert model.entity == stack.entity
        assert stack.ok("GET", f"/v1/preview/models/{model.id}")["name"] == model.name

        # Rollouts through the model's own client carry the logprobs and token ids ART asks for.
        groups = await rollout_groups(model)
        choice = groups[0].trajectories[0].messages_and_choices[-1]
        assert choice.logprobs is not None and choice.logprobs.content
        assert all(t.token.startswith("token_id:") for t in choice.logprobs.content)
        assert choice.model_extra["token_ids"] == [int(t.token.split(":")[1]) for t in choice.logprobs.content]

        await model.log(groups, split="train")
        assert (Path(model.base_path) / model.project / "models" / model.name / "trajectories" / "train" / "0000.parquet").exists()

        # backend.train: the job, the client's polling of its events, then the new step.
        result = await backend.train(model, groups, learning_rate=1e-5)
        assert result.step == 1
        assert result.artifact_name == f"{stack.entity}/{model.project}/{model.name}:step1"
        assert result.metrics["loss/train"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
        assert checkpoint_steps(stack, model.id) == [1]

        # What the trainer received is what ART sent: the groups with rewards, logprobs and token ids.
        jobs = stack.ok("GET", f"/v1/preview/training-jobs?model_id={model.id}")["data"]
        assert [j["status"] for j in jobs] == ["COMPLETED"]
        received = stack.engine("GET", f"/inputs/{jobs[0]['id']}")["lines"]
        assert received == [json.loads(g.model_dump_json()) for g in groups]

        await model.log(metrics=result.metrics, step=result.step)
        history = (Path(model.base_path) / model.project / "models" / model.name / "history.jsonl").read_text().splitlines()
        assert json.loads(history[-1])["training_step"] == 1

        # The checkpoint is served by the names ART builds: latest, and by step.
        for name in (model.get_inference_name(), model.get_inference_name(step=1)):
            completion = await model.openai_client().chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            assert completion.model == name
            assert completion.choices[0].message.content
        engine = stack.engine("GET", "/requests")
        served = [r["body"]["model"] for r in engine["requests"] if r["path"] == "/v1/chat/completions"][-2:]
        adapter = f"{stack.entity}/{model.project}/{model.name}:step1"
        assert [name.split("@")[0] for name in served] == [adapter, adapter]
        assert list(engine["loads"]) == served[:1]

        # A second step, then delete_checkpoints keeps only the latest.
        second = await backend.train(model, await rollout_groups(model), learning_rate=1e-5)
        assert second.step == 2
        assert checkpoint_steps(stack, model.id) == [1, 2]
        await model.delete_checkpoints()
        assert checkpoint_steps(stack, model.id) == [2]

        await backend.delete(model)
        status, body = stack.request("GET", f"/v1/preview/models/{model.id}")
        assert status == 404
        await backend.close()

    asyncio.run(scenario())


def test_wrong_key_is_arts_authentication_error(stack, tmp_path):
    async def scenario():
        with pytest.raises(openai.AuthenticationError) as caught:
            await new_model(stack, tmp_path).register(backend_for(stack, key="ty_wrong-key"))
        assert caught.value.status_code == 401

    asyncio.run(scenario())


def test_untrainable_base_model_is_refused_with_arts_error(stack, tmp_path):
    async def scenario():
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            await new_model(stack, tmp_path, base_model="not/trainable").register(backend_for(stack))
        assert caught.value.status_code == 422
        assert stack.base_model in json.dumps(caught.value.body)

    asyncio.run(scenario())


def test_art_runs_without_w_and_b():
    assert "WANDB_API_KEY" not in os.environ
    assert os.environ["WANDB_MODE"] == "disabled"


def test_sft_through_the_http_api_from_a_weave_dataset(stack, tmp_path, monkeypatch):
    """ART's own train_sft uploads its data as a W&B artifact, which trainyard does not store; SFT goes
    through trainyard's HTTP API instead, here from a dataset the weave SDK published."""
    import weave  # noqa: PLC0415

    rows = [
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
        {"messages": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]},
    ]
    monkeypatch.setenv("WANDB_API_KEY", stack.key)
    weave.init(f"{stack.entity}/sft-data")
    dataset_uri = weave.publish(weave.Dataset(name="arith", rows=rows)).uri()
    weave.finish()
    monkeypatch.delenv("WANDB_API_KEY")

    async def scenario():
        backend = backend_for(stack)
        model = new_model(stack, tmp_path)
        await model.register(backend)
        await backend.close()
        return model

    model = asyncio.run(scenario())
    job = stack.ok("POST", "/v1/preview/sft-training-jobs", {"model_id": model.id, "training_data_url": dataset_uri})
    deadline = time.monotonic() + 60
    while (status := stack.ok("GET", f"/v1/preview/training-jobs/{job['id']}")["status"]) not in ("COMPLETED", "FAILED"):
        assert time.monotonic() < deadline, f"SFT job still {status}"
        time.sleep(0.2)
    assert status == "COMPLETED"
    assert checkpoint_steps(stack, model.id) == [1]
    assert stack.engine("GET", f"/inputs/{job['id']}")["lines"] == rows
