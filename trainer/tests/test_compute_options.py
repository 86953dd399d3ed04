"""The faster compute paths give the numbers of the plain one: torch.compile'd log-probability chunks and decoder
layers equal eager ones, and bf16 LoRA compute (autocast, as ART runs it) stays within bf16 rounding while the LoRA weights, their
gradients and the optimizer stay fp32."""
import torch

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
