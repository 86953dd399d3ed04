"""The trainer on CUDA (skipped where CUDA is absent; the other tests pass --device cpu): one RL step and one SFT step
through the entry point on the tiny random Llama. The base model is loaded in bf16 with fp32 LoRA weights, gradient
checkpointing is on when asked for, losses and gradient norms are finite, and the saved adapter loads in peft on a bf16
base and reproduces the trained model's logits within bf16 tolerance."""
import math

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import trainyard_trainer.rl as rl_module
import trainyard_trainer.sft as sft_module
from helpers import run_job, write_job
from test_jobs import PROBE, rl_groups, sft_rows
from trainyard_trainer.model import trainable_parameters

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def capture(monkeypatch, module):
    """What the trainer's model looks like just before it saves the adapter, and its logits on PROBE."""
    captured = {}
    original = module.save_adapter

    def save(model, output_dir, base_model, state):
        base = model.get_base_model()
        captured["base_dtype"] = base.get_input_embeddings().weight.dtype
        captured["lora_dtypes"] = {p.dtype for p in trainable_parameters(model)}
        captured["device"] = next(model.parameters()).device.type
        captured["checkpointing"] = any(getattr(m, "gradient_checkpointing", False) is True for m in base.modules())
        model.eval()
        with torch.no_grad():
            captured["logits"] = model(input_ids=torch.tensor([PROBE], device="cuda")).logits.float().cpu()
        original(model, output_dir, base_model, state)

    monkeypatch.setattr(module, "save_adapter", save)
    return captured


@torch.no_grad()
def reloaded_logits(model_dir, adapter_dir):
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda")
    base_logits = base(input_ids=torch.tensor([PROBE], device="cuda")).logits.float().cpu()
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    return base_logits, model(input_ids=torch.tensor([PROBE], device="cuda")).logits.float().cpu()


def check(captured, events, model_dir, out):
    assert captured["device"] == "cuda"
    assert captured["base_dtype"] == torch.bfloat16
    assert captured["lora_dtypes"] == {torch.float32}
    # --gradient-checkpointing auto checkpoints only a forward whose activations would not fit: a tiny model's always do.
    assert captured["checkpointing"] is False
    steps = [e["data"] for e in events if e["type"] == "gradient_step"]
    assert steps and all(math.isfinite(s["loss"]) and math.isfinite(s["grad_norm"]) and s["grad_norm"] > 0 for s in steps)
    lora_b = [t for name, t in load_file(f"{out}/adapter_model.safetensors").items() if "lora_B" in name]
    assert lora_b and any(bool(t.abs().sum() > 0) for t in lora_b)  # the step trained (B starts at 0)
    base, reloaded = reloaded_logits(model_dir, out)
    # The trainer runs the LoRA in bf16 under autocast, peft's reload in fp32: the logits (about ±2 here) differ by a few
    # bf16 steps (0.047 at most, measured on an H200).
    assert torch.allclose(reloaded, captured["logits"], atol=8e-2, rtol=2e-2), (reloaded - captured["logits"]).abs().max()
    assert (captured["logits"] - base).abs().max() > 0


def test_rl_step_on_cuda(tmp_path, capsys, model_dir, tokenizer, monkeypatch):
    captured = capture(monkeypatch, rl_module)
    spec, out = write_job(str(tmp_path), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-2})
    code, events, err = run_job(capsys, spec, "--device", "cuda")
    assert code == 0, err
    assert [e["type"] for e in events] == ["training_started", "gradient_step", "checkpoint"]
    check(captured, events, model_dir, out)
    # The same step with gradient checkpointing forced on gives the same loss and gradient norm (bf16 tolerance).
    spec, _ = write_job(str(tmp_path / "on"), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-2})
    code, on, err = run_job(capsys, spec, "--device", "cuda", "--gradient-checkpointing", "on")
    assert code == 0, err
    assert captured["checkpointing"] is True
    off_step, on_step = events[1]["data"], on[1]["data"]
    assert off_step["loss"] == pytest.approx(on_step["loss"], rel=2e-2, abs=1e-3)
    assert off_step["grad_norm"] == pytest.approx(on_step["grad_norm"], rel=2e-2)


def test_sft_step_on_cuda(tmp_path, capsys, model_dir, monkeypatch):
    captured = capture(monkeypatch, sft_module)
    spec, out = write_job(str(tmp_path), "sft", model_dir, sft_rows(), sft_config={"batch_size": 2, "learning_rate": 2e-3})
    code, events, err = run_job(capsys, spec, "--device", "cuda")
    assert code == 0, err
    assert events[0] == {"type": "training_started", "data": {"num_sequences": 4, "device": "cuda"}}
    check(captured, events, model_dir, out)
    losses = [e["data"]["loss"] for e in events if e["type"] == "gradient_step"]
    assert losses[2] < losses[0]  # batches 0 and 2 hold the same rows


def test_packed_rows_on_cuda_match_one_forward_per_sequence(model_dir):
    """Variable-length flash attention (bf16, grouped-query heads) keeps each sequence of a packed row to itself."""
    from trainyard_trainer.model import Options, load_model, packed_logprobs, token_logprobs

    model = load_model(model_dir, None, Options(device="cuda"), torch.device("cuda"))
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=gen).tolist() for n in (17, 3, 40, 9)]
    with torch.no_grad():
        packed, _, counts = packed_logprobs(model, seqs, torch.device("cuda"))
        alone = torch.cat([token_logprobs(model, s, torch.device("cuda"))[0] for s in seqs])
    assert counts == [16, 2, 39, 8]
    torch.testing.assert_close(packed, alone, rtol=0, atol=3e-2)


def test_an_rl_job_on_cuda_trains_the_same_packed_or_not(tmp_path, capsys, model_dir, tokenizer):
    steps = {}
    for packing in ("on", "off"):
        spec, _ = write_job(str(tmp_path / packing), "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-2})
        code, events, err = run_job(capsys, spec, "--device", "cuda", "--packing", packing)
        assert code == 0, err
        steps[packing] = [e["data"] for e in events if e["type"] == "gradient_step"]
    assert len(steps["on"]) == len(steps["off"])
    for on, off in zip(steps["on"], steps["off"]):
        assert on["loss"] == pytest.approx(off["loss"], rel=5e-2, abs=1e-3)
        assert on["grad_norm"] == pytest.approx(off["grad_norm"], rel=5e-2)


def test_single_sequences_through_sdpa_equal_varlen_flash_attention_with_gradients(model_dir):
    """--attention sdpa (cuDNN's kernel first, key and value heads repeated) gives varlen flash attention's numbers."""
    from trainyard_trainer.model import Options, load_model, packed_logprobs

    results = {}
    for attention in ("varlen", "sdpa"):
        model = load_model(model_dir, None, Options(device="cuda", attention=attention), torch.device("cuda"))
        gen = torch.Generator().manual_seed(1)
        seq = torch.randint(0, model.config.vocab_size, (300,), generator=gen).tolist()
        with torch.no_grad():
            for p in trainable_parameters(model):
                p.copy_(torch.randn(p.shape, generator=gen).to(p.device) * 0.05)
        logprobs, _, _ = packed_logprobs(model, [seq], torch.device("cuda"))
        logprobs.sum().backward()
        results[attention] = (logprobs.detach(), torch.cat([p.grad.flatten() for p in trainable_parameters(model)]))
    # bf16 activations: a log-probability near -7 rounds to steps of about 0.03 in either kernel.
    torch.testing.assert_close(results["sdpa"][0], results["varlen"][0], rtol=0, atol=6e-2)
    cosine = torch.nn.functional.cosine_similarity(results["sdpa"][1], results["varlen"][1], dim=0)
    assert cosine > 0.99


def test_layers_replayed_as_cuda_graphs_follow_the_weights_as_they_train(model_dir):
    """--compile graphs: the first forward of a length warms up, the second records its graphs, later ones replay them.
    Three packs of different sequence counts accumulate into each gradient step (gradients kept, not set to None, as
    rl.py does), AdamW updates the weights in place between steps, and every forward gives the eager model's numbers for
    the weights of the moment, with gradient and without (which runs eagerly); inductor skips no graph."""
    from torch._dynamo.utils import counters

    from trainyard_trainer.model import Options, load_model, packed_logprobs
    from trainyard_trainer.rl import make_optimizer

    cuda = torch.device("cuda")
    graphs = load_model(model_dir, None, Options(device="cuda", cuda_graphs=True, length_bucket=64), cuda)
    eager = load_model(model_dir, None, Options(device="cuda", compile_layers=False), cuda)
    gen = torch.Generator().manual_seed(2)
    vocab = graphs.config.vocab_size
    packs = [[torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths] for lengths in ((17, 3, 40), (90,), (5, 6, 7, 8, 9))]
    with torch.no_grad():
        for p in trainable_parameters(graphs):
            p.copy_(torch.randn(p.shape, generator=gen).to(p.device) * 0.05)
    optimizer = make_optimizer(trainable_parameters(graphs), 1e-2, 0.1)
    counters.clear()
    for _ in range(4):
        with torch.no_grad():
            for mine, theirs in zip(trainable_parameters(graphs), trainable_parameters(eager)):
                theirs.copy_(mine)
        optimizer.zero_grad(set_to_none=False)
        eager.zero_grad(set_to_none=False)
        for pack in packs:
            replayed, _, _ = packed_logprobs(graphs, pack, cuda)
            replayed.sum().backward()
            reference, _, _ = packed_logprobs(eager, pack, cuda)
            reference.sum().backward()
            torch.testing.assert_close(replayed.detach(), reference.detach(), rtol=0, atol=6e-2)
            with torch.no_grad():
                torch.testing.assert_close(packed_logprobs(graphs, pack, cuda)[0], reference.detach(), rtol=0, atol=6e-2)
        grads = [torch.cat([p.grad.flatten() for p in trainable_parameters(m)]) for m in (graphs, eager)]
        assert torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0) > 0.99
        optimizer.step()
    assert counters["inductor"]["cudagraph_skips"] == 0
