"""Jobs through the trainer's entry point: SFT lowers the loss, adapters load back with peft and reproduce the trained
logits, optimizer state carries over, nothing-to-train RL batches still give a checkpoint, bad jobs exit 3 naming why, and so do SFT jobs with nothing to train
and training that diverges, before any adapter is saved; numeric options that would break every job are refused by name
(exit 2), and a checkpoint the disk cannot hold leaves no file behind."""
import errno
import json
import math
import os
import pathlib
import re
import shutil

import pytest
import torch
from peft import IA3Config, LoraConfig, PeftModel
from transformers import AutoModelForCausalLM

import trainyard_trainer.model as model_module
import trainyard_trainer.rl as rl_module
from helpers import run_job, save_peft_adapter, write_job
from tiny import build_model_dir, token_choice
from trainyard_trainer.config import parse_rl_config
from trainyard_trainer.main import parse_args
from trainyard_trainer.tokenize import TokenizedResult

PROBE = [2, 5, 10, 11, 12, 3, 2, 6]


def sft_rows():
    rows = []
    for prompt, answer in [("hi", "hello"), ("the weather", "sunny"), ("say one word", "maybe"), ("bye", "thanks")] * 2:
        rows.append({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]})
    return rows


@torch.no_grad()
def sft_loss(model, tokenizer, rows):
    from trainyard_trainer.tokenize import sft_sequence

    total, count = 0.0, 0
    for row in rows:
        seq = sft_sequence(tokenizer, row, "all")
        logits = model(torch.tensor([seq.token_ids])).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(seq.token_ids[1:]).unsqueeze(-1)).squeeze(-1)
        mask = torch.tensor(seq.mask[1:], dtype=torch.float32)
        total += float(-(lp * mask).sum())
        count += int(mask.sum())
    return total / count


def capture_trained_logits(monkeypatch, module):
    """Logits of the trainer's own model on PROBE, taken just before it saves the adapter."""
    captured = {}
    original = module.save_adapter

    def save(model, output_dir, base_model, state):
        model.eval()
        with torch.no_grad():
            captured["logits"] = model(input_ids=torch.tensor([PROBE])).logits.detach().clone()
        original(model, output_dir, base_model, state)

    monkeypatch.setattr(module, "save_adapter", save)
    return captured


def test_sft_lowers_the_loss_and_follows_the_learning_rate_list(tmp_path, capsys, model_dir, tokenizer, monkeypatch):
    import trainyard_trainer.sft as sft_module

    captured = capture_trained_logits(monkeypatch, sft_module)
    rows = sft_rows()
    lrs = [2e-3, 2e-3, 1e-3, 1e-3]
    spec, out = write_job(str(tmp_path), "sft", model_dir, rows, sft_config={"batch_size": 2, "learning_rate": lrs})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert events[0] == {"type": "training_started", "data": {"num_sequences": 4, "device": "cpu"}}
    steps = [e["data"] for e in events if e["type"] == "gradient_step"]
    assert [s["learning_rate"] for s in steps] == lrs
    assert all(s["num_trajectories"] == 2 for s in steps)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    before = sft_loss(base, tokenizer, rows)
    trained = PeftModel.from_pretrained(base, out)
    after = sft_loss(trained, tokenizer, rows)
    assert after < before - 0.3, (before, after)
    # The saved adapter reproduces the trainer's logits.
    with torch.no_grad():
        logits = trained(input_ids=torch.tensor([PROBE])).logits
    assert torch.allclose(logits, captured["logits"], atol=1e-5)


def rl_groups(tokenizer, rewards=((1, 0, 0, 1), (0, 1, 0, 0))):
    return [{"trajectories": [{"messages_and_choices": [{"role": "user", "content": "say one word"},
                                                         token_choice(tokenizer, [w, "<|im_end|>"], [-2.5, -0.3])], "reward": r}
                              for w, r in zip(["maybe", "yes", "no", "maybe"], group)]} for group in rewards]


def test_rl_adapter_loads_with_peft_reproduces_logits_and_the_next_step_continues_the_optimizer(tmp_path, capsys, model_dir, tokenizer, monkeypatch):
    captured = capture_trained_logits(monkeypatch, rl_module)
    spec, first = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-3})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert [e["type"] for e in events] == ["training_started", "gradient_step", "checkpoint"]
    step = events[1]["data"]
    assert {"loss", "grad_norm", "learning_rate", "entropy", "num_tokens", "num_trainable_tokens", "tokens_per_second"} <= set(step)
    assert events[2]["metrics"]["data/step_num_gradient_steps"] == 1
    with open(os.path.join(first, "adapter_config.json")) as f:
        config = json.load(f)
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (8, 16, model_dir)
    assert sorted(config["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    # A plain LoRA, which the trainer itself would continue from: nothing that trains or changes the base model.
    assert (config["peft_type"], config["bias"], config["modules_to_save"], config["init_lora_weights"]) == ("LORA", "none", None, True)
    assert not config.get("trainable_token_indices") and not config.get("layer_replication")
    model_module.check_adapter(first, "step 1")
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), first)
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=torch.tensor([PROBE])).logits, captured["logits"], atol=1e-5)

    spec, second = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), base=first, step=2, config={"learning_rate": 1e-3})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    state = torch.load(os.path.join(second, model_module.OPTIMIZER_FILE), weights_only=True)
    assert state["kind"] == "rl"
    assert {float(s["step"]) for s in state["state"]["state"].values()} == {2.0}  # Adam continued, not restarted


def test_a_batch_with_nothing_to_train_carries_the_checkpoint_forward(tmp_path, capsys, model_dir, tokenizer):
    spec, first = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    assert run_job(capsys, spec, "--device", "cpu")[0] == 0
    spec, second = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer, ((1, 1, 1, 1),)), base=first, step=2)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert events[0] == {"type": "training_started", "data": {"num_sequences": 0, "device": "cpu"}}
    assert events[-1]["metrics"]["data/step_num_gradient_steps"] == 0
    assert events[-1]["metrics"]["data/step_num_groups_trainable"] == 0
    for name in ("adapter_config.json", "adapter_model.safetensors", "optimizer.pt"):
        with open(os.path.join(first, name), "rb") as a, open(os.path.join(second, name), "rb") as b:
            assert a.read() == b.read()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"fixture_mode": "ok"}, "experimental_config.fixture_mode is not a key this trainer knows"),
        ({"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 3}, "experimental_config.kl_penalty_reference_step: no checkpoint of step 3"),
        ({"packed_sequence_length": 99999}, "experimental_config.packed_sequence_length 99999 exceeds the model's maximum 32768"),
        # 8^2000 is past the floats: refused by name before training starts, not an OverflowError traceback (exit 1, retried).
        ({"num_trajectories_learning_rate_multiplier_power": 2000}, "experimental_config.num_trajectories_learning_rate_multiplier_power 2000.0 "
                                                                    "makes the learning rate (learning_rate · K^p) overflow for a row of K = 8 sequences"),
    ],
)
def test_refused_config_exits_3_naming_the_key(tmp_path, capsys, model_dir, tokenizer, config, message):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config=config)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3
    assert events == []
    assert err.strip().splitlines()[-1].startswith(f"trainyard_trainer: {message}")


def test_malformed_inputs_and_unknown_spec_versions_exit_3(tmp_path, capsys, model_dir, tokenizer):
    bad = rl_groups(tokenizer)
    bad[1]["trajectories"][2]["reward"] = "high"
    spec, _ = write_job(str(tmp_path), "rl", model_dir, bad)
    code, _, err = run_job(capsys, spec)
    assert code == 3
    assert err.strip().endswith("inputs line 2.trajectories[2].reward must be a finite number, got 'high'")
    with open(spec) as f:
        data = json.load(f)
    data["spec_version"] = 2
    with open(spec, "w") as f:
        json.dump(data, f)
    assert run_job(capsys, spec)[0] == 3


def test_kl_penalty_against_the_base_model_or_an_earlier_checkpoint(tmp_path, capsys, model_dir, tokenizer):
    spec, first = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-2})
    assert run_job(capsys, spec, "--device", "cpu")[0] == 0
    # Against the base model (LoRA disabled): the trained step-1 policy has drifted from it.
    spec, _ = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), base=first, step=2, config={"kl_penalty_coef": 0.5})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert abs(events[1]["data"]["kl_policy_ref"]) > 1e-4
    assert "loss/kl_policy_ref" in events[-1]["metrics"]
    # Against step 1, the policy this step starts from: no drift yet on the row's single pre-update forward.
    spec, third = write_job(str(tmp_path / "again"), "rl", model_dir, rl_groups(tokenizer), base=first, step=2,
                            config={"kl_penalty_coef": 0.5, "kl_penalty_reference_step": 1})
    os.makedirs(os.path.join(str(tmp_path / "again"), "adapters", "model-1"), exist_ok=True)
    os.symlink(first, os.path.join(str(tmp_path / "again"), "adapters", "model-1", "step-1"))
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert events[1]["data"]["kl_policy_ref"] == pytest.approx(0.0, abs=1e-6)
    assert sorted(os.listdir(third)) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "optimizer.pt"]


def _with_kl_reference(spec, checkpoint):
    """The spec as a server that resolves the KL reference has the worker write it."""
    with open(spec) as f:
        data = json.load(f)
    data["kl_reference_checkpoint"] = checkpoint
    with open(spec, "w") as f:
        json.dump(data, f)


def test_kl_reference_is_loaded_from_the_checkpoint_the_spec_names_wherever_it_lives(tmp_path, capsys, model_dir, tokenizer):
    spec, first = write_job(str(tmp_path / "trained adapters"), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-2})
    assert run_job(capsys, spec, "--device", "cpu")[0] == 0
    # Step 1 lives elsewhere (imported, or trained on another worker): nothing at <output-dir>/../step-1. Its
    # path holds a space, which a file:// URI writes as %20.
    for key, value in (("kl_penalty_reference_step", 1), ("kl_penalty_step_lag", 1)):
        spec, _ = write_job(str(tmp_path / key), "rl", model_dir, rl_groups(tokenizer), base=first, step=2,
                            config={"kl_penalty_coef": 0.5, key: value})
        _with_kl_reference(spec, {"id": "r", "step": 1, "uri": pathlib.Path(first).as_uri()})
        code, events, err = run_job(capsys, spec, "--device", "cpu")
        assert code == 0, err
        assert events[1]["data"]["kl_policy_ref"] == pytest.approx(0.0, abs=1e-6)


def test_kl_reference_the_spec_names_null_is_the_base_model(tmp_path, capsys, model_dir, tokenizer):
    spec, first = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-2})
    assert run_job(capsys, spec, "--device", "cpu")[0] == 0
    spec, _ = write_job(str(tmp_path / "lagged"), "rl", model_dir, rl_groups(tokenizer), base=first, step=2,
                        config={"kl_penalty_coef": 0.5, "kl_penalty_step_lag": 1})
    _with_kl_reference(spec, None)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert abs(events[1]["data"]["kl_policy_ref"]) > 1e-4


def test_kl_reference_the_spec_names_that_is_unreadable_exits_3_without_its_path(tmp_path, capsys, model_dir, tokenizer):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 3})
    missing = str(tmp_path / "gone" / "step-3")
    _with_kl_reference(spec, {"id": "r", "step": 3, "uri": missing})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err) == ("trainyard_trainer: experimental_config.kl_penalty_reference_step: "
                              "the checkpoint of step 3 is not an adapter directory this machine can read")


def last_line(err):
    return err.strip().splitlines()[-1]


def test_inputs_that_are_not_utf8_exit_3_naming_the_line(tmp_path, capsys, model_dir, tokenizer):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    with open(spec) as f:
        inputs_path = json.load(f)["inputs_path"]
    with open(inputs_path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"say one word", b"say \xff\xfe word")
    with open(inputs_path, "wb") as f:
        f.writelines(lines)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err).startswith("trainyard_trainer: inputs line 2 is not UTF-8: 'utf-8' codec can't decode byte 0xff")


def test_token_ids_outside_the_models_vocabulary_exit_3_before_training_starts(tmp_path, capsys, model_dir, tokenizer):
    groups = rl_groups(tokenizer)
    groups[0]["trajectories"][1]["messages_and_choices"][1]["logprobs"]["content"][0]["token"] = "token_id:999999"
    spec, _ = write_job(str(tmp_path), "rl", model_dir, groups)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err) == ("trainyard_trainer: inputs line 1.trajectories[1].messages_and_choices[1]: logprobs.content[0].token holds "
                              "token id 999999, outside the model's vocabulary [0, 32)")


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (LoraConfig(target_modules=["q_proj"], modules_to_save=["lm_head"]), "modules_to_save ['lm_head']"),
        (LoraConfig(target_modules=["q_proj"], bias="all"), "bias 'all'"),
        (LoraConfig(target_modules=["q_proj"], trainable_token_indices=[5, 6]), "trainable_token_indices [5, 6]"),
        (LoraConfig(target_modules=["q_proj"], layer_replication=[[0, 2], [1, 2]]), "layer_replication [[0, 2], [1, 2]]"),
        (LoraConfig(target_modules=["q_proj"], init_lora_weights="pissa"), "init_lora_weights 'pissa'"),
        (IA3Config(target_modules=["q_proj", "down_proj"], feedforward_modules=["down_proj"]), "peft_type 'IA3' (only LORA)"),
        (LoraConfig(target_modules=["q_proj"], use_dora=True), "use_dora True"),
        (LoraConfig(target_modules=["q_proj"], lora_bias=True), "lora_bias True"),
    ],
)
def test_adapters_that_would_change_the_base_model_or_that_vllm_cannot_serve_are_refused_naming_the_setting(tmp_path, capsys, model_dir, tokenizer, config, named):
    adapter = save_peft_adapter(model_dir, str(tmp_path / "imported"), config)
    spec, _ = write_job(str(tmp_path / "base"), "rl", model_dir, rl_groups(tokenizer), base=adapter, step=2)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err) == (f"trainyard_trainer: base_checkpoint_uri {adapter!r} is an adapter with {named}: this trainer takes "
                              "plain LoRA adapters, which leave the base model unchanged (a resident trainer keeps it for the next job) "
                              "and which vLLM serves")
    spec, _ = write_job(str(tmp_path / "reference"), "rl", model_dir, rl_groups(tokenizer), config={"kl_penalty_coef": 0.1, "kl_ref_adapter_path": adapter})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err).startswith(f"trainyard_trainer: experimental_config.kl_ref_adapter_path {adapter!r} is an adapter with {named}: ")


def test_an_adapter_that_does_not_load_onto_the_base_model_exits_3_naming_it_and_why(tmp_path, capsys, model_dir, tokenizer):
    narrower = build_model_dir(str(tmp_path / "narrower"), hidden=64)
    adapter = save_peft_adapter(narrower, str(tmp_path / "narrower-adapter"), LoraConfig(target_modules=["q_proj", "v_proj"]))
    spec, _ = write_job(str(tmp_path / "base"), "rl", model_dir, rl_groups(tokenizer), base=adapter, step=2)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    line = last_line(err)
    assert line.startswith(f"trainyard_trainer: adapter {adapter!r} does not load onto base model {model_dir!r}: RuntimeError: "
                           "Error(s) in loading state_dict for PeftModel")
    assert ": size mismatch for base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight: " in line
    assert line.endswith(" ...") and len(line) < 600
    # The same adapter as the KL reference.
    spec, _ = write_job(str(tmp_path / "reference"), "rl", model_dir, rl_groups(tokenizer), config={"kl_penalty_coef": 0.1, "kl_ref_adapter_path": adapter})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err).startswith(f"trainyard_trainer: adapter {adapter!r} does not load onto base model {model_dir!r}: RuntimeError: ")
    # Without its weights.
    os.remove(os.path.join(adapter, "adapter_model.safetensors"))
    spec, _ = write_job(str(tmp_path / "missing"), "rl", model_dir, rl_groups(tokenizer), base=adapter, step=2)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == []
    assert last_line(err) == f"trainyard_trainer: base_checkpoint_uri {adapter!r} has no adapter_model.safetensors"


def assert_failed_without_a_checkpoint(code, events, err, out, message):
    assert code == 3, err
    assert last_line(err).startswith(f"trainyard_trainer: {message}"), last_line(err)
    assert "checkpoint" not in [e["type"] for e in events]
    assert os.listdir(out) == []


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        # Adam's first step at this rate makes the weights infinite: the second batch's loss is NaN.
        (sft_rows(), "training diverged: the loss or its gradient became non-finite at gradient step 2 (loss nan, gradient norm nan); "
                     "the learning rate (1e+308) may be too high"),
        # One batch: its loss and gradient were finite, the weights it leaves are not.
        (sft_rows()[:2], "training diverged: the adapter's weights became non-finite after gradient step 1; the learning rate (1e+308) may be too high"),
    ],
    ids=["several batches", "one batch"],
)
def test_sft_that_diverges_exits_3_before_the_step_is_applied_or_an_adapter_saved(tmp_path, capsys, model_dir, rows, message):
    spec, out = write_job(str(tmp_path), "sft", model_dir, rows, sft_config={"batch_size": 2, "learning_rate": 1e308})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert_failed_without_a_checkpoint(code, events, err, out, message)
    assert all(math.isfinite(e["data"]["loss"]) for e in events if e["type"] == "gradient_step")


def test_rl_that_diverges_exits_3_before_an_adapter_is_saved(tmp_path, capsys, model_dir, tokenizer):
    spec, out = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e308, "packed_sequence_length": 16})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert_failed_without_a_checkpoint(code, events, err, out, "training diverged: the loss or its gradient became non-finite at gradient step 2")


def test_sft_with_nothing_to_train_exits_3_saying_how_many_rows_were_too_long_or_had_no_assistant_turn(tmp_path, capsys, model_dir):
    user = {"role": "user", "content": "hi"}
    long_row = {"messages": [{"role": "user", "content": "say one word please " * 4}, {"role": "assistant", "content": "yes"}]}
    spec, out = write_job(str(tmp_path), "sft", model_dir, [{"messages": [user]}, long_row, {"messages": [user, user]}])
    code, events, err = run_job(capsys, spec, "--device", "cpu", "--max-seq-length", "16")
    assert_failed_without_a_checkpoint(code, events, err, out, "no SFT row has a token to train: of 3 rows, 1 are longer than the maximum sequence "
                                                              "length (16 tokens) and were dropped, and 2 have no assistant turn to train")
    assert events == []


def test_a_huge_learning_rate_multiplier_power_is_accepted_for_rows_it_leaves_finite():
    # ART bounds the power no more than the server does; K^p only overflows for the rows of a given batch.
    config = parse_rl_config({"learning_rate": 1e-3, "num_trajectories_learning_rate_multiplier_power": 2000})
    one = TokenizedResult([1, 2], [0, 1], [math.nan, -1.0])
    assert rl_module.step_learning_rate(config, [[one]]) == 1e-3
    assert rl_module.step_learning_rate(parse_rl_config({"learning_rate": 1e-3, "num_trajectories_learning_rate_multiplier_power": -2000}), [[one, one]]) == 0.0


def null_logprob_groups(tokenizer):
    """rl_groups whose Choices carry `token_id:N` entries without values, as an engine or proxy may send them."""
    groups = rl_groups(tokenizer)
    for group in groups:
        for trajectory in group["trajectories"]:
            for entry in trajectory["messages_and_choices"][1]["logprobs"]["content"]:
                entry["logprob"] = None
    return groups


def test_choices_whose_logprobs_are_all_null_exit_3_naming_the_first_trajectory_before_training_starts(tmp_path, capsys, model_dir, tokenizer):
    spec, out = write_job(str(tmp_path), "rl", model_dir, null_logprob_groups(tokenizer))
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == [], err
    assert last_line(err).startswith("trainyard_trainer: inputs line 1.trajectories[0]: its Choices' logprobs hold no values (`logprob` is null), "
                                     "nor do any others in the batch: request logprobs=True from the engine, or set allow_training_without_logprobs")
    assert os.listdir(out) == []


def test_choices_whose_logprobs_are_all_null_train_with_ratio_1_when_allowed(tmp_path, capsys, model_dir, tokenizer):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, null_logprob_groups(tokenizer), config={"allow_training_without_logprobs": True, "learning_rate": 1e-3})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    steps = [e["data"] for e in events if e["type"] == "gradient_step"]
    assert len(steps) == 1 and steps[0]["num_trainable_tokens"] == 16
    assert steps[0]["importance_ratio_mean"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("option", "value", "what"),
    [
        ("--lora-rank", "0", "a positive integer"),  # peft's ValueError traceback: exit 1, retried
        ("--lora-alpha", "0", "a positive integer"),  # a LoRA scaled by 0: every job "completes" untrained
        ("--max-seq-length", "0", "a positive number of tokens"),  # every sequence dropped: every job "completes" untrained
        ("--pack-length", "-1", "a non-negative number of tokens"),
        ("--lora-rank", "8.5", "a positive integer"),
    ],
)
def test_numeric_options_that_would_break_every_job_are_refused_by_name(capsys, option, value, what):
    with pytest.raises(SystemExit) as exited:
        parse_args([option, value, "spec.json"])
    assert exited.value.code == 2
    assert f"argument {option}: {value!r} is not {what}" in capsys.readouterr().err


def test_numeric_options_take_their_valid_values():
    args = parse_args(["--lora-rank", "16", "--lora-alpha", "32", "--max-seq-length", "4096", "--pack-length", "0", "spec.json"])
    assert (args.lora_rank, args.lora_alpha, args.max_seq_length, args.pack_length) == (16, 32, 4096, 0)


def test_a_checkpoint_the_disk_cannot_hold_leaves_no_file_behind_and_names_the_directory_and_its_free_space(tmp_path, capsys, model_dir, tokenizer, monkeypatch):
    def full_disk(state, path, *args, **kwargs):
        # What torch.save does on a full disk: part of the file, then an error that never says "no space".
        with open(path, "wb") as f:
            f.write(b"\0" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 57536 vs 57428")

    monkeypatch.setattr(model_module.torch, "save", full_disk)
    spec, out = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 1
    assert "checkpoint" not in [e["type"] for e in events]
    assert os.listdir(out) == []  # neither the adapter beside a truncated optimizer.pt, nor the staging directory
    assert re.search(rf"CheckpointWriteError: cannot write the checkpoint into {re.escape(out)} \(\d+ bytes \([\d.]+ MiB\) free there\): "
                     r"RuntimeError: \[enforce fail", last_line(err)), last_line(err)


def test_a_checkpoint_carried_forward_onto_a_full_disk_leaves_no_file_behind(tmp_path, capsys, model_dir, tokenizer, monkeypatch):
    spec, first = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer))
    assert run_job(capsys, spec, "--device", "cpu")[0] == 0
    copy2 = shutil.copy2

    def full_disk(source, target, *args, **kwargs):
        if source.endswith(model_module.OPTIMIZER_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        return copy2(source, target, *args, **kwargs)

    monkeypatch.setattr(model_module.shutil, "copy2", full_disk)
    spec, second = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer, ((1, 1, 1, 1),)), base=first, step=2)
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 1
    assert "checkpoint" not in [e["type"] for e in events]
    assert os.listdir(second) == []
    assert f"cannot write the checkpoint into {second} (" in last_line(err)
    assert last_line(err).endswith("OSError: [Errno 28] No space left on device")
