"""Artifacts through the real wandb SDK against trainyard: upload, commit, look up by version and alias,
download, and SFT jobs that name a dataset artifact."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
import wandb
from wandb.errors import CommError

ROWS = [{"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]} for i in range(3)]


def _project() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def _log_artifact(stack, project: str, name: str, files: dict[str, bytes], *, type: str = "dataset", aliases: list[str] | None = None, tmp: Path) -> None:
    """What ART's train_sft and deploy helpers do: a run, an artifact of local files, log_artifact, wait, finish."""
    source = tmp / uuid.uuid4().hex
    source.mkdir()
    for path, data in files.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(data)
    run = wandb.init(entity=stack.entity, project=project, name=f"{name}-upload", settings=wandb.Settings(silent=True))
    artifact = wandb.Artifact(name, type=type, metadata={"format": "jsonl"})
    for path in files:
        artifact.add_file(str(source / path), name=path)
    run.log_artifact(artifact, aliases=aliases)
    artifact.wait()
    run.finish()


def _download(stack, ref: str, root: Path, type: str = "dataset") -> dict[str, bytes]:
    artifact = wandb.Api().artifact(f"{stack.entity}/{ref}", type=type)
    artifact.download(root=str(root))
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_an_uploaded_artifact_downloads_byte_identical_by_version_and_alias(stack, tmp_path):
    project = _project()
    first = {"train.jsonl": b"".join(json.dumps(r).encode() + b"\n" for r in ROWS), "nested/notes.txt": b"hello"}
    _log_artifact(stack, project, "data", first, aliases=["step1"], tmp=tmp_path)
    assert _download(stack, f"{project}/data:v0", tmp_path / "v0") == first
    assert _download(stack, f"{project}/data:step1", tmp_path / "step1") == first
    assert _download(stack, f"{project}/data:latest", tmp_path / "latest") == first


def test_a_second_version_moves_latest_and_leaves_v0_as_it_was(stack, tmp_path):
    project = _project()
    first = {"train.jsonl": b'{"messages": []}\n'}
    second = {"train.jsonl": b'{"messages": [{"role": "user", "content": "2"}]}\n'}
    _log_artifact(stack, project, "data", first, aliases=["step1"], tmp=tmp_path)
    _log_artifact(stack, project, "data", second, aliases=["step2"], tmp=tmp_path)
    api = wandb.Api()
    latest = api.artifact(f"{stack.entity}/{project}/data:latest", type="dataset")
    assert latest.version == "v1"
    assert sorted(latest.aliases) == ["latest", "step2"]
    assert _download(stack, f"{project}/data:v0", tmp_path / "v0") == first
    assert _download(stack, f"{project}/data:latest", tmp_path / "v1") == second
    versions = sorted(a.version for a in api.artifacts("dataset", f"{stack.entity}/{project}/data"))
    assert versions == ["v0", "v1"]


def test_a_missing_artifact_is_a_comm_error(stack):
    with pytest.raises(CommError):
        wandb.Api().artifact(f"{stack.entity}/{_project()}/nothing:latest", type="lora")


def test_another_tenants_key_can_neither_read_nor_write_the_artifacts(stack, tmp_path):
    project = _project()
    _log_artifact(stack, project, "private", {"train.jsonl": b"{}\n"}, tmp=tmp_path)
    other = stack.new_user(f"other{uuid.uuid4().hex[:6]}")
    api = wandb.Api(api_key=other)
    with pytest.raises(Exception, match="cannot reach entity"):
        api.artifact(f"{stack.entity}/{project}/private:v0", type="dataset")
    status, answer = stack.request(
        "POST",
        "/graphql",
        {"query": "mutation($i: CreateArtifactInput!) { createArtifact(input: $i) { artifact { id } } }", "variables": {"i": {"entityName": stack.entity, "projectName": project, "artifactCollectionName": "private", "artifactTypeName": "dataset", "digest": "0" * 32}}},
        key=other,
    )
    assert status == 200
    assert answer["errors"][0]["message"] == f'This API key cannot reach entity "{stack.entity}".'


def test_an_sft_job_trains_on_a_dataset_artifact_named_by_version_or_alias(stack, tmp_path):
    project = _project()
    data = b"".join(json.dumps(r).encode() + b"\n" for r in ROWS)
    _log_artifact(stack, project, "sft-data", {"train.jsonl": data}, aliases=["golden"], tmp=tmp_path)
    model = f"m-{uuid.uuid4().hex[:6]}"
    status, answer = stack.request("POST", "/v1/preview/models", {"entity": stack.entity, "project": project, "name": model, "base_model": stack.base_model})
    assert status in (200, 201), answer
    for ref in ("sft-data:v0", "sft-data:golden"):
        url = f"wandb-artifact:///{stack.entity}/{project}/{ref}"
        status, job = stack.request("POST", "/v1/preview/sft-training-jobs", {"model_id": answer["id"], "training_data_url": url})
        assert status in (200, 201), job
        state = stack.wait_for_job(job["id"])
        assert state["status"] == "COMPLETED", state
        _, inputs = stack.request("GET", f"{stack.control_url}/inputs/{job['id']}", key="")
        assert inputs["lines"] == ROWS


def test_a_runs_logged_metrics_and_summary_are_readable_through_the_training_api_and_resume_at_the_next_step(stack):
    project = _project()
    name = f"model-{uuid.uuid4().hex[:6]}"
    # What ART's Model._get_wandb_run and model.log do: a run named after the model, resume="allow", log without step=.
    run = wandb.init(entity=stack.entity, project=project, name=name, id=name, resume="allow", config={"base_model": "m"})
    for step in (1, 2):
        run.log({"training_step": step, "train/reward": step / 10})
    run.summary["final_reward"] = 0.2
    run.finish()
    status, answer = stack.request("GET", f"/v1/preview/wandb-runs/{stack.entity}/{project}/{name}/history")
    assert status == 200, answer
    assert answer["state"] == "finished"
    assert answer["summary"]["final_reward"] == 0.2
    assert [(row["step"], row["values"]["training_step"], row["values"]["train/reward"]) for row in answer["history"]] == [(0, 1, 0.1), (1, 2, 0.2)]

    again = wandb.init(entity=stack.entity, project=project, name=name, id=name, resume="allow")
    again.log({"training_step": 3, "train/reward": 0.3})
    again.finish()
    _, answer = stack.request("GET", f"/v1/preview/wandb-runs/{stack.entity}/{project}/{name}/history?after_step=1")
    assert [(row["step"], row["values"]["training_step"]) for row in answer["history"]] == [(2, 3)]

    other = stack.new_user(f"other{uuid.uuid4().hex[:6]}")
    status, answer = stack.request("GET", f"/v1/preview/wandb-runs/{stack.entity}/{project}/{name}/history", key=other)
    assert (status, answer) == (404, {"detail": f"W&B run {stack.entity}/{project}/{name} not found"})


def test_tags_notes_and_group_of_wandb_init_and_the_public_apis_run_update_reach_the_run(stack):
    project = _project()
    run = wandb.init(entity=stack.entity, project=project, id="tagged", tags=["baseline", "lr-sweep"], notes="first try", group="exp-7", settings=wandb.Settings(silent=True))
    run.log({"x": 1})
    run.finish()
    public = wandb.Api().run(f"{stack.entity}/{project}/tagged")
    assert (public.tags, public.notes, public.group) == (["baseline", "lr-sweep"], "first try", "exp-7")
    public.summary["post"] = 42
    public.summary.update()
    public.config["post_cfg"] = "v"
    public.name = "renamed-by-api"
    public.tags.append("checked")
    public.update()
    fresh = wandb.Api().run(f"{stack.entity}/{project}/tagged")
    assert (fresh.summary.get("post"), fresh.config.get("post_cfg"), fresh.name, fresh.tags) == (42, "v", "renamed-by-api", ["baseline", "lr-sweep", "checked"])
    status, answer = stack.request("GET", f"/v1/preview/wandb-runs/{stack.entity}/uncategorized")
    assert (status, answer) == (200, {"data": []})


def test_artifact_tags_and_aliases_set_through_the_sdk_are_kept(stack, tmp_path):
    project = _project()
    source = tmp_path / "a.txt"
    source.write_text("tagged")
    run = wandb.init(entity=stack.entity, project=project, settings=wandb.Settings(silent=True))
    artifact = wandb.Artifact("tagged", type="dataset")
    artifact.add_file(str(source))
    run.log_artifact(artifact, aliases=["candidate"], tags=["gold"])
    artifact.wait()
    run.finish()
    saved = wandb.Api().artifact(f"{stack.entity}/{project}/tagged:latest")
    assert saved.tags == ["gold"]
    saved.tags.append("reviewed")
    saved.aliases.append("production")
    saved.aliases.remove("candidate")
    saved.save()
    fresh = wandb.Api().artifact(f"{stack.entity}/{project}/tagged:latest")
    assert (sorted(fresh.tags), sorted(fresh.aliases)) == (["gold", "reviewed"], ["latest", "production"])


def test_integers_beyond_2_to_the_53_in_history_and_summary_keep_their_digits(stack):
    project = _project()
    run = wandb.init(entity=stack.entity, project=project, id="bigint", settings=wandb.Settings(silent=True))
    run.log({"tokens_seen": 2**62 + 1})
    run.finish()
    assert wandb.Api().run(f"{stack.entity}/{project}/bigint").summary["tokens_seen"] == 2**62 + 1
