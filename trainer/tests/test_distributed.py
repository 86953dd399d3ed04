"""Several processes through torchrun (gloo on CPU): each rank trains one packed row of a gradient step, the step
covers WORLD_SIZE rows, only rank 0 prints events and saves the adapter."""
import json
import os
import subprocess
import sys

from helpers import write_job
from test_jobs import rl_groups


def test_torchrun_with_two_processes_trains_two_rows_per_gradient_step(tmp_path, model_dir, tokenizer):
    # Rows of 12 tokens hold one sequence each: 8 rows, 2 per gradient step.
    spec, out = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-3, "packed_sequence_length": 12})
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    done = subprocess.run([torchrun, "--nproc-per-node", "2", "-m", "trainyard_trainer", "--device", "cpu", spec], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [e["type"] for e in events] == ["training_started"] + ["gradient_step"] * 4 + ["checkpoint"]
    assert events[0]["data"]["num_sequences"] == 4
    assert all(e["data"]["num_trainable_tokens"] == 4 for e in events[1:5])  # two rows of 2 sampled tokens
    assert events[-1]["metrics"]["data/step_num_gradient_steps"] == 4
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= set(os.listdir(out))
