"""The faster compute paths give the numbers of the plain one: torch.compile'd log-probability chunks and decoder
layers equal eager ones, padded forwards for CUDA graphs equal unpadded ones, the fused AdamW trains the default one's
adapter, and bf16 LoRA compute (autocast, as ART runs it) stays within bf16 rounding while the LoRA weights, their
gradients and the optimizer stay fp32."""
import os

import pytest
import torch
from helpers import run_job, write_job
from safetensors.torch import load_file
from test_jobs import rl_groups

from trainyard_trainer.main import parse_args
from trainyard_trainer.model import Options, load_model, packed_logprobs, trainable_parameters

SEQUENCES = [[3, 5, 7, 9, 11, 2], [4, 4, 4, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]]
CPU = torch.device("cpu")


def logprobs_and_grads(model):
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    model.zero_grad()
    logprobs, entropies, _ = packed_logprobs(model, SEQUENCES, CPU, chunk_size=8)
    logprobs.sum().backward()
    return logprobs.detach(), entropies, [p.grad.clone() for p in trainable_parameters(model)]


def test_compiled_logprob_chunks_equal_eager_ones_with_their_gradients(model_dir):
    eager = logprobs_and_grads(load_model(model_dir, None, Options(device="cpu", compile_logprobs=False), CPU))
    compiled = logprobs_and_grads(load_model(model_dir, None, Options(device="cpu", compile_logprobs=True), CPU))
    torch.testing.assert_close(compiled[0], eager[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(compiled[1], eager[1], rtol=0, atol=1e-5)
    for a, b in zip(compiled[2], eager[2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_lm_head_gradient_kept_from_the_forward_pass_equals_the_recomputed_one(model_dir):
    recomputed = logprobs_and_grads(load_model(model_dir, None, Options(device="cpu", fused_logprobs=False), CPU))
    fused = logprobs_and_grads(load_model(model_dir, None, Options(device="cpu", fused_logprobs=True), CPU))
    torch.testing.assert_close(fused[0], recomputed[0], rtol=0, atol=0)
    torch.testing.assert_close(fused[1], recomputed[1], rtol=0, atol=1e-6)  # exp(z - log Σ) against softmax: float rounding
    # W_y - Σ p·W against Σ (onehot - p)·W: the same sum in another order, so equal to float rounding.
    for a, b in zip(fused[2], recomputed[2]):
        assert (a - b).norm() <= 1e-4 * b.norm()
    assert all(g.norm() > 0 for g in fused[2])


def test_bf16_lora_compute_keeps_fp32_weights_and_gradients_within_bf16_rounding(model_dir):
    fp32_model = load_model(model_dir, None, Options(device="cpu", lora_dtype="fp32"), CPU)
    bf16_model = load_model(model_dir, None, Options(device="cpu", lora_dtype="bf16"), CPU)
    reference, bf16 = logprobs_and_grads(fp32_model), logprobs_and_grads(bf16_model)
    assert bf16[0].dtype == torch.float32  # the log-softmax runs in fp32 whatever the compute dtype
    assert {p.dtype for p in trainable_parameters(bf16_model)} == {torch.float32}
    assert {g.dtype for g in bf16[2]} == {torch.float32}
    # bf16 has 8 bits of mantissa: log-probabilities of a random model agree to a few hundredths, never exactly.
    difference = (bf16[0] - reference[0]).abs().max()
    assert 0 < difference < 0.1
    for a, b in zip(bf16[2], reference[2]):
        cosine = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
        assert cosine > 0.99


def test_compiled_decoder_layers_equal_eager_ones_under_gradient_checkpointing(model_dir):
    eager = logprobs_and_grads(load_model(model_dir, None, Options(device="cpu", gradient_checkpointing=True, compile_logprobs=False), CPU))
    compiled_model = load_model(model_dir, None, Options(device="cpu", gradient_checkpointing=True, compile_logprobs=False, compile_layers=True), CPU)
    compiled = logprobs_and_grads(compiled_model)
    torch.testing.assert_close(compiled[0], eager[0], rtol=0, atol=1e-5)
    for a, b in zip(compiled[2], eager[2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_auto_checkpointing_recomputes_only_a_forward_whose_activations_exceed_the_budget(model_dir):
    model = load_model(model_dir, None, Options(device="cpu", compile_logprobs=False), CPU)
    assert model.trainyard_checkpointing is False
    reference = logprobs_and_grads(model)
    model.trainyard_activation_budget = 1.0  # bytes: nothing fits
    checkpointed = logprobs_and_grads(model)
    assert model.trainyard_checkpointing is True
    torch.testing.assert_close(checkpointed[0], reference[0], rtol=0, atol=1e-6)
    for a, b in zip(checkpointed[2], reference[2]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    model.trainyard_activation_budget = 1e15
    logprobs_and_grads(model)
    assert model.trainyard_checkpointing is False


def graph_forwards(model):
    """Logprobs, entropies and LoRA gradients of a packed row and of a single sequence, and no-gradient logprobs."""
    packed = logprobs_and_grads(model)
    model.zero_grad()
    single, _, _ = packed_logprobs(model, SEQUENCES[2:], CPU, chunk_size=8)
    single.sum().backward()
    with torch.no_grad():
        inference, _, _ = packed_logprobs(model, SEQUENCES, CPU, chunk_size=8)
    return packed, (single.detach(), [p.grad.clone() for p in trainable_parameters(model)]), inference


def assert_same_forwards(actual, expected, atol):
    (packed, single, inference), (packed_ref, single_ref, inference_ref) = actual, expected
    for got, want in ((packed, packed_ref), (single, single_ref)):
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=atol)
        for a, b in zip(got[-1], want[-1]):  # compiled kernels sum in another order: equal to float rounding
            assert (a - b).norm() <= 1e-4 * b.norm()
    torch.testing.assert_close(packed[1], packed_ref[1], rtol=0, atol=atol)
    torch.testing.assert_close(inference, inference_ref, rtol=0, atol=atol)


def test_forwards_padded_to_a_length_bucket_give_the_unpadded_numbers(model_dir):
    """--compile graphs pads a forward up to a multiple of --length-bucket (24 packed tokens to 32, 14 to 16): a padding
    sequence of its own after packed ones, padding at the end of a single (causal) sequence; only real positions count."""
    plain = load_model(model_dir, None, Options(device="cpu", compile_logprobs=False), CPU)
    reference = graph_forwards(plain)
    model = load_model(model_dir, None, Options(device="cpu", compile_logprobs=False), CPU)
    model.trainyard_length_bucket = 16
    seen = []
    original = model.get_base_model().get_decoder().forward

    def forward(**kw):
        cu = kw.get("cu_seq_lens_q")
        seen.append((kw["input_ids"].shape[1], None if cu is None else cu.tolist(), kw.get("max_length_q")))
        return original(**kw)

    model.get_base_model().get_decoder().forward = forward
    padded = graph_forwards(model)
    assert seen == [
        (32, [0, 6, 10, 24, 32], 32),  # the packed row: a padding sequence of 8 tokens, varlen told the padded length
        (16, None, None),  # the single sequence: 2 tokens of padding at its end
        (24, [0, 6, 10, 24], 14),  # the forward without gradient: unpadded
    ]
    assert_same_forwards(padded, reference, atol=1e-5)
    # Five sequences with the padding one: three empty ones make the count a power of two (one graph per count).
    row = [*SEQUENCES, [5, 6, 7], [9, 9]]
    seen.clear()
    expected = packed_logprobs(plain, row, CPU, chunk_size=8)[0]
    got = packed_logprobs(model, row, CPU, chunk_size=8)[0]
    assert seen == [(32, [0, 6, 10, 24, 27, 29, 32, 32, 32], 32)]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_decoder_layers_compiled_for_cuda_graphs_equal_eager_ones(model_dir, monkeypatch):
    """--compile graphs on a CPU: the layers compile with mode reduce-overhead and static shapes (graphs are CUDA's; here
    it compiles alone), forwards are padded, and a forward without gradient runs the layers eagerly; the numbers stay
    eager's."""
    reference = graph_forwards(load_model(model_dir, None, Options(device="cpu", compile_logprobs=False), CPU))
    compiles = []
    plain_compile = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: compiles.append(kwargs) or plain_compile(self, **kwargs))
    model = load_model(model_dir, None, Options(device="cpu", compile_logprobs=False, cuda_graphs=True, length_bucket=16), CPU)
    assert model.trainyard_length_bucket == 16 and model.trainyard_compiled_layers
    assert compiles and all(kwargs == {"dynamic": False, "mode": "reduce-overhead"} for kwargs in compiles)
    assert torch._dynamo.config.recompile_limit >= 256  # a compile per padded shape: none falls back to eager early
    assert_same_forwards(graph_forwards(model), reference, atol=1e-5)
    assert all(layer._compiled_call_impl is not None for layer in model.trainyard_compiled_layers)
    # Before a forward with gradient, every LoRA weight has a zeroed gradient buffer of its own to accumulate into
    # (taking the backward's output instead would hand it memory that the CUDA graphs reuse).
    model.zero_grad(set_to_none=True)
    packed_logprobs(model, SEQUENCES, CPU, chunk_size=8)
    assert model.trainyard_graph_params == trainable_parameters(model)
    assert all(p.grad is not None and not p.grad.any() for p in trainable_parameters(model))


def test_the_fused_adamw_trains_the_adapter_of_the_default_one_and_continues_its_saved_state(tmp_path, capsys, model_dir, tokenizer):
    """--adamw fused (the default) against torch's default AdamW over two jobs, the second continuing the first's
    optimizer state; a state saved by either implementation continues in the other."""
    def job(name, adamw, base=None):
        spec, out = write_job(str(tmp_path / name), "rl", model_dir, rl_groups(tokenizer), base=base, step=2 if base else 1, config={"learning_rate": 1e-3})
        code, _, err = run_job(capsys, spec, "--device", "cpu", "--adamw", adamw)
        assert code == 0, err
        state = torch.load(os.path.join(out, "optimizer.pt"), weights_only=True)["state"]
        return out, load_file(os.path.join(out, "adapter_model.safetensors")), state

    default_1, default_adapter_1, default_state = job("d1", "default")
    fused_1, fused_adapter_1, fused_state = job("f1", "fused")
    assert [g["fused"] for g in default_state["param_groups"]] == [None]
    assert [g["fused"] for g in fused_state["param_groups"]] == [True]
    _, default_adapter_2, _ = job("d2", "default", base=default_1)
    _, crossed_adapter_2, crossed_state = job("x2", "fused", base=default_1)  # a default-saved state, continued fused
    _, back_adapter_2, back_state = job("b2", "default", base=fused_1)  # and the other way round
    assert [g["fused"] for g in crossed_state["param_groups"]] == [True] and [g["fused"] for g in back_state["param_groups"]] == [None]
    assert {float(s["step"]) for s in crossed_state["state"].values()} == {float(s["step"]) for s in back_state["state"].values()} == {2.0}
    # The same update to float rounding; Adam divides a ~0 gradient by its own magnitude, so allow 1% of one step (lr 1e-3).
    for actual, expected in ((fused_adapter_1, default_adapter_1), (crossed_adapter_2, default_adapter_2), (back_adapter_2, default_adapter_2)):
        assert actual.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(actual[name], expected[name], rtol=1e-4, atol=1e-5)
    assert any((default_adapter_2[name] - default_adapter_1[name]).abs().max() > 1e-4 for name in default_adapter_1)


def test_a_length_bucket_that_is_not_a_positive_number_is_refused_by_name(capsys):
    assert parse_args(["--compile", "graphs", "--length-bucket", "512", "spec.json"]).length_bucket == 512
    for value in ("0", "-256", "abc"):
        with pytest.raises(SystemExit) as exited:
            parse_args(["--length-bucket", value, "spec.json"])
        assert exited.value.code == 2
        assert f"argument --length-bucket: '{value}' is not a positive number of tokens" in capsys.readouterr().err
