"""A trainyard model's checkpoints as W&B `lora` artifacts, through the real wandb SDK making exactly the
calls of ART's helpers: the pull helper (`api.artifact(...:stepN, type="lora").download(root=...)`), the
fork helper's version listing (`api.artifacts("lora", ...)`), record_provenance after every serverless
step (`:latest`, `metadata[...] = ...`, `save()`), and deploy/fork pushes (`Artifact(name, type="lora")`,
`add_dir`, `log_artifact(aliases=["step{N}", "latest"])`), which become checkpoints the gateway serves."""

from __future__ import annotations

import io
import json
import re
import struct
import tarfile
import uuid
from pathlib import Path

import pytest
import wandb
from wandb.errors import CommError


def _safetensors(payload: bytes) -> bytes:
    """A valid safetensors file: the length of its JSON header, the header, then bytes."""
    header = json.dumps({"__metadata__": {"format": "pt"}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


def _adapter(base: str, payload: bytes) -> dict[str, bytes]:
    return {
        "adapter_config.json": json.dumps({"base_model_name_or_path": base, "peft_type": "LORA", "r": 8}).encode(),
        "adapter_model.safetensors": _safetensors(payload),
    }


def _write(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def _read(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _model(stack) -> tuple[str, str, str]:
    project, name = f"p-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:6]}"
    status, answer = stack.request("POST", "/v1/preview/models", {"entity": stack.entity, "project": project, "name": name, "base_model": stack.base_model})
    assert status in (200, 201), answer
    return project, name, answer["id"]


def _train_step(stack, model_id: str) -> None:
    """One RL step through the worker: its trainer writes the adapter directory the checkpoint points at."""
    choice = {"finish_reason": "stop", "index": 0, "logprobs": None, "message": {"role": "assistant", "content": "left"}}
    group = {"trajectories": [{"messages_and_choices": [{"role": "user", "content": "board"}, choice], "reward": r} for r in (1.0, 0.0)]}
    status, job = stack.request("POST", "/v1/preview/training-jobs", {"model_id": model_id, "trajectory_groups": [group]})
    assert status in (200, 201), job
    assert stack.wait_for_job(job["id"])["status"] == "COMPLETED"


def _import(stack, model_id: str, files: dict[str, bytes]) -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    status, answer = stack.request("POST", f"/v1/preview/models/{model_id}/checkpoints/import", raw=archive.getvalue(), headers={"Content-Type": "application/gzip"})
    assert status == 200, answer


def _steps(stack, model_id: str) -> list[int]:
    _, page = stack.request("GET", f"/v1/preview/models/{model_id}/checkpoints")
    return [c["step"] for c in page["data"]]


def _push(stack, project: str, name: str, adapter: Path, aliases: list[str], metadata: dict | None = None) -> wandb.Artifact:
    """ART's deploy_wandb: a run, the adapter directory as a lora artifact, log_artifact with aliases, wait, finish."""
    run = wandb.init(entity=stack.entity, project=project, name=f"{name} (deployment)", settings=wandb.Settings(api_key=stack.key, silent=True))
    try:
        artifact = wandb.Artifact(name, type="lora", metadata=metadata or {}, storage_region="coreweave-us")
        artifact.add_dir(str(adapter))
        run.log_artifact(artifact, aliases=aliases)
        artifact.wait()
        return artifact
    finally:
        run.finish()


def test_the_pull_helper_downloads_a_trained_and_an_imported_checkpoint_byte_identical(stack, tmp_path):
    project, name, model_id = _model(stack)
    _train_step(stack, model_id)
    imported = _adapter(stack.base_model, b"imported weights")
    _import(stack, model_id, imported)
    api = wandb.Api(api_key=stack.key)

    trained = api.artifact(f"{stack.entity}/{project}/{name}:step1", type="lora")
    trained.download(root=str(tmp_path / "step1"))
    # What the worker's trainer wrote into the checkpoint's directory (test/fixtures/trainer.mjs).
    assert _read(tmp_path / "step1") == {
        "adapter_config.json": json.dumps({"base_model_name_or_path": stack.base_model}, separators=(",", ":")).encode(),
        "adapter_model.safetensors": f"fixture adapter for {name} step 1\n".encode(),
    }
    latest = api.artifact(f"{stack.entity}/{project}/{name}:latest", type="lora")
    assert (latest.version, sorted(latest.aliases)) == ("v2", ["latest", "step2"])
    latest.download(root=str(tmp_path / "latest"))
    assert _read(tmp_path / "latest") == imported

    # The fork helper's listing: the highest stepN alias is the newest checkpoint.
    versions = {a.version: sorted(a.aliases) for a in api.artifacts("lora", f"{stack.entity}/{project}/{name}")}
    assert versions == {"v2": ["latest", "step2"], "v1": ["step1"]}


def test_record_provenance_saves_its_metadata_on_the_latest_checkpoint_and_is_a_no_op_before_the_first(stack):
    project, name, model_id = _model(stack)
    api = wandb.Api()
    with pytest.raises(CommError):
        api.artifact(f"{stack.entity}/{project}/{name}:latest", type="lora")
    _import(stack, model_id, _adapter(stack.base_model, b"w"))
    for expected in (["serverless-rl"], ["serverless-rl", "serverless-sft"]):
        artifact = api.artifact(f"{stack.entity}/{project}/{name}:latest", type="lora")
        existing = artifact.metadata.get("wandb.provenance")
        artifact.metadata["wandb.provenance"] = [*(existing or []), expected[-1]]
        artifact.save()
    again = wandb.Api().artifact(f"{stack.entity}/{project}/{name}:step1", type="lora")
    assert again.metadata == {"wandb.provenance": ["serverless-rl", "serverless-sft"]}


def test_a_pushed_lora_artifact_becomes_the_checkpoint_its_step_alias_names_and_is_served(stack, tmp_path):
    project, name, model_id = _model(stack)
    _train_step(stack, model_id)
    files = _adapter(stack.base_model, b"deployed weights")
    artifact = _push(stack, project, name, _write(tmp_path / "adapter", files), ["step7", "latest"], {"wandb.base_model": stack.base_model, "wandb.provenance": ["local-rl"]})
    assert artifact.version == "v7"
    assert _steps(stack, model_id) == [1, 7]

    pulled = wandb.Api().artifact(f"{stack.entity}/{project}/{name}:step7", type="lora")
    assert pulled.metadata == {"wandb.base_model": stack.base_model, "wandb.provenance": ["local-rl"]}
    pulled.download(root=str(tmp_path / "pulled"))
    assert _read(tmp_path / "pulled") == files

    status, completion = stack.request("POST", "/v1/chat/completions", {"model": f"{stack.entity}/{project}/{name}:step7", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200, completion
    # The gateway loaded the pushed adapter into the engine under the checkpoint's name.
    _, recorded = stack.request("GET", f"{stack.control_url}/requests", key="")
    assert any(adapter.startswith(f"{stack.entity}/{project}/{name}:step7@") for adapter in recorded["loads"]), recorded["loads"]


def test_the_fork_helpers_calls_copy_the_newest_checkpoint_of_one_model_into_another(stack, tmp_path):
    project, source, source_id = _model(stack)
    for payload in (b"first", b"second"):
        _import(stack, source_id, _adapter(stack.base_model, payload))
    status, answer = stack.request("POST", "/v1/preview/models", {"entity": stack.entity, "project": project, "name": f"{source}-fork", "base_model": stack.base_model})
    assert status in (200, 201), answer
    # ART's _experimental_fork_checkpoint: the highest stepN alias, download, then a push with no wait().
    api = wandb.Api(api_key=stack.key)
    versions = api.artifacts("lora", f"{stack.entity}/{project}/{source}")
    step, newest = max(((int(alias[4:]), a) for a in versions for alias in a.aliases if alias.startswith("step")), key=lambda pair: pair[0])
    newest.download(root=str(tmp_path / "source"))
    wandb.login(key=stack.key)
    run = wandb.init(entity=stack.entity, project=project, job_type="checkpoint-fork", name=f"fork-{uuid.uuid4().hex[:6]}", settings=wandb.Settings(silent=True))
    artifact = wandb.Artifact(f"{source}-fork", type="lora")
    artifact.add_dir(str(tmp_path / "source"))
    run.log_artifact(artifact, aliases=[f"step{step}", "latest"])
    run.finish()
    assert step == 2
    assert _steps(stack, answer["id"]) == [2]
    api.artifact(f"{stack.entity}/{project}/{source}-fork:step2", type="lora").download(root=str(tmp_path / "fork"))
    assert _read(tmp_path / "fork") == _adapter(stack.base_model, b"second")


def test_a_push_that_cannot_become_a_checkpoint_fails_with_the_reason_and_stores_nothing(stack, tmp_path):
    project, name, model_id = _model(stack)
    other_base = _write(tmp_path / "other-base", _adapter("Qwen/Qwen3-14B", b"w"))
    # The commit's GraphQL error reaches the SDK as the ValueError artifact.wait() raises.
    with pytest.raises(ValueError) as refused:
        _push(stack, project, name, other_base, ["step1", "latest"])
    assert f"commitArtifact The artifact cannot become a checkpoint of {stack.entity}/{project}/{name}: the adapter was trained on Qwen/Qwen3-14B, but model {stack.entity}/{project}/{name} is based on {stack.base_model}." in str(refused.value)
    assert _steps(stack, model_id) == []

    with pytest.raises(ValueError) as refused:
        _push(stack, project, "no-such-model", _write(tmp_path / "ok", _adapter(stack.base_model, b"w")), ["step1", "latest"])
    assert re.search(re.escape(f'No trainyard model {stack.entity}/{project}/no-such-model: a "lora" artifact becomes a checkpoint'), str(refused.value))


def test_another_tenants_key_cannot_pull_the_checkpoints(stack):
    project, name, model_id = _model(stack)
    _import(stack, model_id, _adapter(stack.base_model, b"private"))
    other = wandb.Api(api_key=stack.new_user(f"other{uuid.uuid4().hex[:6]}"))
    with pytest.raises(Exception, match=re.escape(f'This API key cannot reach entity "{stack.entity}".')):
        other.artifact(f"{stack.entity}/{project}/{name}:step1", type="lora")
    with pytest.raises(Exception, match=re.escape(f'This API key cannot reach entity "{stack.entity}".')):
        list(other.artifacts("lora", f"{stack.entity}/{project}/{name}"))
