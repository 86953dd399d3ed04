"""The resident trainer: one process serving job after job gives what a new process per job gives (adapter, optimizer
state, metrics, bit for bit on CPU), whatever ran before it in the process; it takes the adapter and optimizer state
from memory only for the very files it saved last; it speaks the stdin/stdout protocol of trainyard-worker, survives
a permanent failure, and its memory does not grow over 50 jobs of two models."""
import gc
import json
import os
import subprocess
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from helpers import save_peft_adapter, write_job
from test_jobs import rl_groups, sft_rows
from tiny import build_model_dir
from trainyard_trainer.main import parse_args, run_reporting_permanent
from trainyard_trainer.model import OPTIMIZER_FILE
from trainyard_trainer.resident import ResidentSource

TRAINER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Values that measure time, not the math.
TIMED = {"tokens_per_second", "throughput/train_packed_tok_per_s", "throughput/train_tok_per_s"}


class Chain:
    """The jobs of one model, each continuing from the last checkpoint, written under `root/<model>`."""

    def __init__(self, root, model, base_model):
        self.root, self.model, self.base_model, self.step, self.last = os.path.join(root, model), model, base_model, 0, None

    def job(self, kind, inputs, **config):
        self.step += 1
        options = {"sft_config": {"batch_size": 2, "learning_rate": 1e-3}} if kind == "sft" else {"config": {"learning_rate": 1e-3, **config}}
        spec, out = write_job(self.root, kind, self.base_model, inputs, base=self.last, step=self.step, **options)
        with open(spec) as f:
            data = json.load(f)
        data["model"]["id"] = self.model
        with open(spec, "w") as f:
            json.dump(data, f)
        self.last = out
        return spec, out


def run_cold(capsys, spec):
    code = run_reporting_permanent(parse_args(["--device", "cpu", spec]), spec)
    return code, read_events(capsys)


def run_resident(capsys, source, spec):
    code = run_reporting_permanent(parse_args(["--device", "cpu", spec]), spec, source)
    source.end(ok=code == 0)
    return code, read_events(capsys)


def read_events(capsys):
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], err


def untimed(events):
    """The events without timings, the resident's own start fields and the checkpoint URI (each run has its dir)."""
    kept = []
    for e in events:
        e = json.loads(json.dumps(e))
        e.pop("uri", None)
        for key in ("data", "metrics"):
            for name in TIMED | {"start", "load_seconds", "adapter"}:
                e.get(key, {}).pop(name, None)
        kept.append(e)
    return kept


def assert_same_checkpoint(a, b):
    ta, tb = load_file(os.path.join(a, "adapter_model.safetensors")), load_file(os.path.join(b, "adapter_model.safetensors"))
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert torch.equal(ta[name], tb[name]), name
    oa, ob = (torch.load(os.path.join(d, OPTIMIZER_FILE), weights_only=True) for d in (a, b))
    assert oa["kind"] == ob["kind"]
    assert oa["state"]["param_groups"] == ob["state"]["param_groups"]
    assert sorted(oa["state"]["state"]) == sorted(ob["state"]["state"])
    for index, state in oa["state"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, ob["state"]["state"][index][key]), (index, key)


def test_job_after_job_in_one_process_matches_a_new_process_per_job_bit_for_bit(tmp_path, capsys, model_dir, tokenizer):
    groups, rows = rl_groups(tokenizer), sft_rows()
    plan = [("rl", groups), ("rl", groups), ("sft", rows), ("rl", groups)]  # the switch to SFT and back resets Adam
    cold, resident = Chain(tmp_path / "cold", "m", model_dir), Chain(tmp_path / "resident", "m", model_dir)
    source = ResidentSource()
    starts = []
    for kind, inputs in plan:
        spec, cold_out = cold.job(kind, inputs)
        code, (cold_events, err) = run_cold(capsys, spec)
        assert code == 0, err
        spec, resident_out = resident.job(kind, inputs)
        code, (resident_events, err) = run_resident(capsys, source, spec)
        assert code == 0, err
        assert untimed(resident_events) == untimed(cold_events)
        assert_same_checkpoint(cold_out, resident_out)
        started = resident_events[0]["data"]
        assert started["load_seconds"] >= 0
        starts.append((started["start"], started["adapter"]))
    # Loaded once; each later job continues from the adapter and Adam state it holds (the SFT job's Adam state is new).
    assert starts == [("cold", "new"), ("warm", "memory"), ("warm", "memory"), ("warm", "memory")]


def test_nothing_of_one_model_reaches_the_next_job_of_another(tmp_path, capsys, model_dir, tokenizer):
    other_base = build_model_dir(str(tmp_path / "other-base"), seed=1, hidden=64)
    groups = rl_groups(tokenizer)
    source = ResidentSource()
    a, b, c = (Chain(tmp_path / "resident", name, base) for name, base in (("a", model_dir), ("b", model_dir), ("c", other_base)))
    reference = {name: Chain(tmp_path / "cold", name, base) for name, base in (("a", model_dir), ("b", model_dir), ("c", other_base))}
    starts = []
    # a, a, then b from scratch on the same base, c on another base, then a again from its own step 2 on disk.
    for chain in (a, a, b, c, a, b):
        spec, out = chain.job("rl", groups)
        code, (events, err) = run_resident(capsys, source, spec)
        assert code == 0, err
        starts.append((events[0]["data"]["start"], events[0]["data"]["adapter"]))
        cold_spec, cold_out = reference[chain.model].job("rl", groups)
        code, (cold_events, err) = run_cold(capsys, cold_spec)
        assert code == 0, err
        assert untimed(events) == untimed(cold_events)
        assert_same_checkpoint(cold_out, out)
        assert sorted(os.listdir(out)) == sorted(os.listdir(cold_out))
    assert starts == [("cold", "new"), ("warm", "memory"), ("warm", "new"), ("cold", "new"), ("cold", "disk"), ("warm", "disk")]
    # No replaced base model, adapter or optimizer is still referenced: only the resident base (inside its LoRA) is alive.
    gc.collect()
    alive = [o for o in gc.get_objects() if issubclass(type(o), (PreTrainedModel, PeftModel, torch.optim.Optimizer))]
    assert sorted(type(o).__name__ for o in alive) == ["LlamaForCausalLM", "LlamaModel", "PeftModelForCausalLM"]
    assert source.peft in alive


def test_a_checkpoint_rewritten_under_the_same_path_is_read_from_disk_not_memory(tmp_path, capsys, model_dir, tokenizer):
    groups = rl_groups(tokenizer)
    source = ResidentSource()
    chain = Chain(tmp_path / "resident", "m", model_dir)
    spec, first = chain.job("rl", groups)
    assert run_resident(capsys, source, spec)[0] == 0
    # Another run's step 1 copied over this one's, as a restore from backup would: same name, other files.
    other = Chain(tmp_path / "other", "m", model_dir)
    spec, other_first = other.job("rl", rl_groups(tokenizer, ((0, 1, 1, 0), (1, 0, 0, 0))))
    assert run_cold(capsys, spec)[0] == 0
    for name in os.listdir(other_first):
        os.replace(os.path.join(other_first, name), os.path.join(first, name))
    spec, second = chain.job("rl", groups)
    code, (events, err) = run_resident(capsys, source, spec)
    assert code == 0, err
    assert events[0]["data"]["adapter"] == "disk"
    expected = Chain(tmp_path / "cold", "m", model_dir)
    expected.last, expected.step = first, 1
    spec, cold_second = expected.job("rl", groups)
    assert run_cold(capsys, spec)[0] == 0
    assert_same_checkpoint(cold_second, second)


def test_a_failed_job_leaves_no_adapter_behind(tmp_path, capsys, model_dir, tokenizer):
    source = ResidentSource()
    chain = Chain(tmp_path / "resident", "m", model_dir)
    spec, first = chain.job("rl", rl_groups(tokenizer))
    assert run_resident(capsys, source, spec)[0] == 0
    spec, _ = chain.job("rl", rl_groups(tokenizer), packed_sequence_length=99999)
    code, (_, err) = run_resident(capsys, source, spec)
    assert code == 3 and "packed_sequence_length 99999" in err
    assert source.peft is None and source.last is None
    chain.last = first  # the retry with a good config continues from step 1, now read from disk
    spec, _ = chain.job("rl", rl_groups(tokenizer))
    code, (events, err) = run_resident(capsys, source, spec)
    assert code == 0, err
    assert (events[0]["data"]["start"], events[0]["data"]["adapter"]) == ("warm", "disk")


def test_an_adapter_that_would_change_the_base_model_is_refused_and_the_resident_base_stays_as_loaded(tmp_path, capsys, model_dir, tokenizer):
    original = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    # An imported adapter that also trains its own copy of lm_head (modules_to_save), changed: taking a LoRA off again
    # (unload()) would leave that copy in the base model as its lm_head, for every later job.
    imported = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                              LoraConfig(target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        imported.base_model.model.lm_head.modules_to_save["default"].weight.mul_(3.0)
    imported_dir = str(tmp_path / "imported")
    imported.save_pretrained(imported_dir)
    groups = rl_groups(tokenizer)
    source = ResidentSource()
    spec, _ = Chain(tmp_path / "resident", "a", model_dir).job("rl", groups)
    assert run_resident(capsys, source, spec)[0] == 0
    tenant = Chain(tmp_path / "resident", "b", model_dir)
    tenant.last, tenant.step = imported_dir, 1
    spec, _ = tenant.job("rl", groups)
    code, (events, err) = run_resident(capsys, source, spec)
    assert code == 3 and events == []
    assert err.strip().splitlines()[-1].startswith(
        f"trainyard_trainer: base_checkpoint_uri {imported_dir!r} is an adapter with modules_to_save ['lm_head']: this trainer takes plain "
        "LoRA adapters, which leave the base model unchanged")
    assert source.peft is None
    resident = source.base.state_dict()
    assert sorted(resident) == sorted(original)
    for name, tensor in original.items():
        assert torch.equal(resident[name], tensor), name
    # The next model's first job trains as in a process of its own.
    spec, out = Chain(tmp_path / "resident", "c", model_dir).job("rl", groups)
    code, (events, err) = run_resident(capsys, source, spec)
    assert code == 0, err
    assert (events[0]["data"]["start"], events[0]["data"]["adapter"]) == ("warm", "new")
    spec, cold_out = Chain(tmp_path / "cold", "c", model_dir).job("rl", groups)
    code, (cold_events, err) = run_cold(capsys, spec)
    assert code == 0, err
    assert untimed(events) == untimed(cold_events)
    assert_same_checkpoint(cold_out, out)


def test_an_adapter_that_fails_to_load_leaves_no_lora_layers_in_the_resident_base(tmp_path, capsys, model_dir, tokenizer):
    narrower = build_model_dir(str(tmp_path / "narrower"), hidden=64)
    adapter = save_peft_adapter(narrower, str(tmp_path / "narrower-adapter"), LoraConfig(target_modules=["q_proj", "v_proj"]))
    groups = rl_groups(tokenizer)
    source = ResidentSource()
    spec, _ = Chain(tmp_path / "resident", "a", model_dir).job("rl", groups)
    assert run_resident(capsys, source, spec)[0] == 0
    tenant = Chain(tmp_path / "resident", "b", model_dir)
    tenant.last, tenant.step = adapter, 1
    spec, _ = tenant.job("rl", groups)
    code, (_, err) = run_resident(capsys, source, spec)
    assert code == 3 and f"adapter {adapter!r} does not load onto base model" in err
    # peft had already put the adapter's LoRA layers into the base model's: it is loaded again for the next job.
    assert source.base is None and source.peft is None
    spec, out = Chain(tmp_path / "resident", "c", model_dir).job("rl", groups)
    code, (events, err) = run_resident(capsys, source, spec)
    assert code == 0, err
    assert (events[0]["data"]["start"], events[0]["data"]["adapter"]) == ("cold", "new")
    spec, cold_out = Chain(tmp_path / "cold", "c", model_dir).job("rl", groups)
    code, (cold_events, err) = run_cold(capsys, spec)
    assert code == 0, err
    assert untimed(events) == untimed(cold_events)
    assert_same_checkpoint(cold_out, out)


class ResidentProcess:
    """`python -m trainyard_trainer` as trainyard-worker runs it when it offers residency."""

    def __init__(self, first_spec, stderr_path):
        env = {**os.environ, "TRAINYARD_RESIDENT": "1", "PYTHONPATH": TRAINER_DIR, "OMP_NUM_THREADS": "1"}
        env.pop("WORLD_SIZE", None)
        self.stderr_path = stderr_path
        # stderr to a file: a pipe nobody reads would fill up over 50 jobs and block the trainer.
        self.process = subprocess.Popen([sys.executable, "-m", "trainyard_trainer", "--device", "cpu", first_spec], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(stderr_path, "w"), text=True)

    def job_end(self):
        """The events of the current job, up to its job_end line."""
        events = []
        for line in self.process.stdout:
            if line.startswith("{"):
                events.append(json.loads(line))
                if events[-1]["type"] == "job_end":
                    return events
        raise AssertionError(f"the trainer exited with {self.process.wait()}: {open(self.stderr_path).read()[-2000:]}")

    def send(self, spec):
        self.process.stdin.write(json.dumps({"type": "job", "spec_path": spec}) + "\n")
        self.process.stdin.flush()


def test_over_stdin_fifty_jobs_of_two_models_on_two_bases_keep_memory_flat(tmp_path, model_dir, tokenizer):
    other_base = build_model_dir(str(tmp_path / "other-base"), seed=1)
    groups = rl_groups(tokenizer)
    chains = [Chain(tmp_path, "a", model_dir), Chain(tmp_path, "b", other_base)]
    spec, _ = chains[0].job("rl", groups)
    trainer = ResidentProcess(spec, tmp_path / "trainer.stderr")
    try:
        ends = []
        for n in range(50):
            events = trainer.job_end()
            assert events[-1] == {**events[-1], "type": "job_end", "spec_path": spec, "exit_code": 0}
            assert events[-2]["type"] == "checkpoint"
            ends.append(events[-1])
            if n == 1:
                # A permanent failure in between: exit code 3 in job_end, and the process serves the next job.
                bad, _ = Chain(tmp_path, "bad", model_dir).job("rl", groups, packed_sequence_length=99999)
                trainer.send(bad)
                assert trainer.job_end()[-1]["exit_code"] == 3
            if n < 49:
                spec, _ = chains[(n + 1) % 2].job("rl", groups)
                trainer.send(spec)
        trainer.process.stdin.close()  # end-of-file: no more jobs
        assert trainer.process.wait(timeout=60) == 0
    finally:
        if trainer.process.poll() is None:
            trainer.process.kill()
            trainer.process.wait()
    peaks = [end["max_rss_bytes"] for end in ends]
    assert peaks[-1] <= 1.10 * peaks[1], [p // 2**20 for p in peaks]
