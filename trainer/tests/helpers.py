"""Running the trainer in-process on a job spec, and sampling rollouts from a tiny policy."""
from __future__ import annotations

import json
import os

import torch

from trainyard_trainer.main import main

PROMPTS = ["say one word", "answer one word", "please say one word", "say one word please"]


def write_job(tmp, kind, base_model, inputs, *, base=None, step=1, config=None, sft_config=None):
    """A job directory like trainyard-worker's: spec.json, inputs.jsonl and the output dir <root>/<model>/step-<N>."""
    job = os.path.join(tmp, f"job-{kind}-{step}")
    os.makedirs(job, exist_ok=True)
    inputs_path = os.path.join(job, "inputs.jsonl")
    with open(inputs_path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in inputs)
    output_dir = os.path.join(tmp, "adapters", "model-1", f"step-{step}")
    os.makedirs(output_dir, exist_ok=True)
    job_config = {"experimental_config": config or {}}
    if kind == "sft":
        job_config["sft_config"] = sft_config or {}
    spec = {
        "spec_version": 1, "job": {"id": f"job-{step}", "kind": kind, "attempt": 1},
        "model": {"id": "model-1", "entity": "e", "project": "p", "name": "m", "base_model": base_model},
        "base_checkpoint": None if base is None else {"id": "c", "step": step - 1, "uri": base},
        "base_checkpoint_uri": base, "target_step": step, "config": job_config,
        "inputs_path": inputs_path, "num_inputs": len(inputs), "output_dir": output_dir, "worker_id": "test",
    }
    path = os.path.join(job, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path, output_dir


def save_peft_adapter(model_dir, path, config):
    """An adapter directory as peft writes it: `config` (a peft config) applied to the model in `model_dir`."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config).save_pretrained(path)
    return path


def run_job(capsys, spec_path, *flags):
    """(exit code, events printed on stdout, stderr)."""
    code = main([*flags, spec_path])
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, events, err


def prompt_ids(tokenizer, prompt):
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)


@torch.no_grad()
def next_token_logprobs(model, tokenizer, prompt):
    ids = tokenizer.encode(prompt_ids(tokenizer, prompt), add_special_tokens=False)
    logits = model(torch.tensor([ids])).logits[0, -1].float()
    return torch.log_softmax(logits, -1)
