#!/usr/bin/env python3
"""The trainer command contract in 50 lines (docs/worker-runtime.md, "Wrapping a Python trainer").

This trains nothing. The trainer trainyard ships is trainer/ (docs/trainer.md): LoRA adapters trained with
ART's loss, installed with `npm run trainer:setup` and run as

    trainyard-worker --server ... --command "trainer/.venv/bin/python -m trainyard_trainer"

This file stays as the smallest example of the contract for wrapping another library: it reads the job
spec, prints events as JSON lines on stdout, writes into the output directory, and prints the checkpoint
line last. Replace the marked parts with calls into your library.
"""
import json
import os
import sys

PERMANENT_FAILURE = 3  # the worker fails the job without a retry


def emit(event):
    # One JSON object per line, flushed at once so that progress shows while the job runs.
    # allow_nan=False: NaN is not JSON; a NaN loss raises here instead of garbling the line.
    print(json.dumps(event, allow_nan=False), flush=True)


def main():
    spec_path = sys.argv[-1] if len(sys.argv) > 1 else os.environ["TRAINYARD_JOB_SPEC"]
    with open(spec_path) as f:
        spec = json.load(f)

    # RL jobs: {"experimental_config": {...}}; SFT jobs also carry "sft_config".
    config = spec["config"].get("experimental_config") or {}
    learning_rate = config.get("learning_rate") or 1e-5
    if learning_rate <= 0:
        print(f"learning_rate must be positive, got {learning_rate}", file=sys.stderr)
        sys.exit(PERMANENT_FAILURE)

    # One trajectory group (RL) or one {"messages": [...]} row (SFT) per line.
    with open(spec["inputs_path"]) as f:
        inputs = [json.loads(line) for line in f if line.strip()]
    emit({"type": "training_started", "data": {"num_sequences": len(inputs)}})

    # --- replace with your library -------------------------------------------------------------
    # model = load(spec["model"]["base_model"], adapter=spec["base_checkpoint_uri"])  # None: base model
    metrics = {}
    for step in range(1, 4):
        loss = 1.0 / step  # loss = trainer.step(batch)
        emit({"type": "gradient_step", "data": {"loss": loss, "learning_rate": learning_rate}})
        metrics = {"train/loss": loss}
    output_dir = spec["output_dir"]
    # model.save_pretrained(output_dir)
    with open(os.path.join(output_dir, "adapter_config.json"), "w") as f:
        json.dump({"base_model_name_or_path": spec["model"]["base_model"], "r": 8}, f)
    # --------------------------------------------------------------------------------------------

    emit({"type": "checkpoint", "uri": output_dir, "metrics": metrics})


if __name__ == "__main__":
    main()
