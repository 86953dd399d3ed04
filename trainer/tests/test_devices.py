"""Which device a job runs on: a device this machine lacks exits 4 (the machine is at fault, not the job, so the job is
not failed for good), in a process per job and in a resident one, and `--device auto` says which device it chose."""
import io
import json
import os
import sys

import pytest
import torch

from helpers import run_job, write_job
from test_jobs import last_line, rl_groups
from trainyard_trainer.config import UnfitMachine
from trainyard_trainer.main import main
from trainyard_trainer.model import pick_device


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine whose CUDA is gone (a broken driver, a container started without GPUs), on any machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_cuda_device_this_machine_lacks_exits_4_naming_it(tmp_path, capsys, model_dir, tokenizer, no_cuda):
    spec, out = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    code, events, err = run_job(capsys, spec, "--device", "cuda")
    assert code == 4 and events == []
    assert last_line(err) == "trainyard_trainer: --device cuda was asked for but CUDA is not available on this machine"
    assert os.listdir(out) == []


@pytest.mark.parametrize(("requested", "local_rank", "named"), [("cuda:3", None, "cuda:3"), ("cuda", "2", "cuda:2"), ("auto", "2", "cuda:2")])
def test_a_cuda_index_past_the_machines_devices_is_an_unfit_machine(monkeypatch, requested, local_rank, named):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)  # torchrun with more ranks than GPUs
    with pytest.raises(UnfitMachine, match=f"^--device {requested} needs {named}, but this machine has 2 CUDA device"):
        pick_device(requested)


def test_a_resident_trainer_whose_device_is_missing_reports_the_job_with_4_and_takes_no_other(tmp_path, capsys, model_dir, tokenizer, no_cuda, monkeypatch):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    monkeypatch.setenv("TRAINYARD_RESIDENT", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    waiting = io.StringIO(json.dumps({"type": "job", "spec_path": spec}) + "\n")
    monkeypatch.setattr(sys, "stdin", waiting)
    code = main(["--device", "cuda", spec])
    out, err = capsys.readouterr()
    assert code == 4
    ends = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(e["type"], e["spec_path"], e["exit_code"]) for e in ends] == [("job_end", spec, 4)]
    assert "--device cuda was asked for but CUDA is not available on this machine" in err
    assert waiting.tell() == 0  # the next job is left for a worker whose machine can run it


def test_device_auto_says_which_device_it_chose_and_training_started_carries_it(tmp_path, capsys, model_dir, tokenizer, no_cuda):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    code, events, err = run_job(capsys, spec)
    assert code == 0, err
    assert "trainyard_trainer: --device auto chose cpu (CUDA is not available)" in err.splitlines()
    assert events[0]["type"] == "training_started" and events[0]["data"]["device"] == "cpu"
