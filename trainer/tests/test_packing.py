"""Packed forwards: several sequences in one row give the log-probabilities, entropies and gradients of one forward
per sequence, and no attention crosses from one sequence into another."""
import random

import pytest
import torch

from trainyard_trainer.model import Options, load_model, packed_logprobs, token_logprobs, trainable_parameters
from trainyard_trainer.packing import plan


def sequences(vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def model(model_dir):
    return load_model(model_dir, None, Options(device="cpu"), torch.device("cpu"))


def perturb_lora(model):
    """A non-zero LoRA (B starts at 0), so that gradients reach A and B both."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def test_a_packed_row_gives_each_sequence_the_logprobs_and_entropies_of_its_own_forward(model):
    seqs = sequences(model.config.vocab_size, [7, 1, 12, 2, 30])
    packed, packed_entropy, counts = packed_logprobs(model, seqs, torch.device("cpu"), chunk_size=8)
    assert counts == [6, 0, 11, 1, 29]
    assert packed.shape == (sum(counts),)
    alone = [token_logprobs(model, s, torch.device("cpu"), chunk_size=8) for s in seqs]
    torch.testing.assert_close(packed, torch.cat([lp for lp, _ in alone]), rtol=0, atol=2e-5)
    torch.testing.assert_close(packed_entropy, torch.cat([ent for _, ent in alone]), rtol=0, atol=2e-5)


def test_a_sequence_in_a_packed_row_is_unaffected_by_the_tokens_before_it(model):
    tail = sequences(model.config.vocab_size, [9], seed=3)[0]
    for before in ([1, 2, 3], [5] * 20):
        logprobs, _, counts = packed_logprobs(model, [before, tail], torch.device("cpu"))
        alone, _ = token_logprobs(model, tail, torch.device("cpu"))
        torch.testing.assert_close(logprobs[counts[0]:], alone, rtol=0, atol=2e-5)


def test_packed_gradients_equal_the_sum_of_per_sequence_gradients(model):
    perturb_lora(model)
    seqs = sequences(model.config.vocab_size, [10, 4, 17], seed=5)
    params = trainable_parameters(model)
    weights = [torch.linspace(0.5, 1.5, len(s) - 1) for s in seqs]

    model.zero_grad()
    packed, _, _ = packed_logprobs(model, seqs, torch.device("cpu"))
    (packed * torch.cat(weights)).sum().backward()
    packed_grads = [p.grad.clone() for p in params]

    model.zero_grad()
    for s, w in zip(seqs, weights):
        (token_logprobs(model, s, torch.device("cpu"))[0] * w).sum().backward()
    for got, p in zip(packed_grads, params):
        # fp32 sums in another order: the rounding scales with the tensor's largest values (and with the CPU's kernels).
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-4 * float(p.grad.abs().max()))
    model.zero_grad()


def test_the_pack_plan_fills_packs_in_order_and_puts_an_over_long_sequence_alone():
    packs = plan([3, 4, 2, 9, 1, 1], capacity=8)
    assert [p.members for p in packs] == [[0, 1], [2], [3], [4, 5]]
    assert [p.tokens for p in packs] == [7, 2, 9, 2]
    assert [p.members for p in plan([3, 4, 2], capacity=8, packing=False)] == [[0], [1], [2]]


WORDS = ["yes", "no", "maybe", "hello", "the", "weather", "is", "sunny", "ok", "thanks"]


def rl_groups(tokenizer, model=None):
    """Two groups of completions of 1 to 9 words. With `model`, each sampled token's log-probability is the model's own
    (the engine and the trainer agree exactly)."""
    from trainyard_trainer.tokenize import tokenize_history
    from tiny import token_choice

    rng = random.Random(7)
    groups = []
    for g, prompt in enumerate(["say one word", "answer one word please"]):
        trajectories = []
        for t, length in enumerate([1, 9, 4, 6] if g == 0 else [3, 7, 2]):
            words = [rng.choice(WORDS) for _ in range(length - 1)] + ["<|im_end|>"]
            messages = [{"role": "user", "content": prompt}]
            choice = token_choice(tokenizer, words, [-0.5 - 0.1 * k for k in range(len(words))])
            if model is not None:
                seq = tokenize_history(tokenizer, [*messages, choice], None)[0]
                with torch.no_grad():
                    logprobs, _ = token_logprobs(model, seq.token_ids, torch.device("cpu"))
                sampled = [float(logprobs[i - 1]) for i, m in enumerate(seq.mask) if m]
                choice = token_choice(tokenizer, words, sampled)
            trajectories.append({"messages_and_choices": [*messages, choice], "reward": float((t + g) % 2)})
        groups.append({"trajectories": trajectories})
    return groups


def adapter_tensors(directory):
    from safetensors.torch import load_file

    return load_file(f"{directory}/adapter_model.safetensors")


def run_both(tmp_path, capsys, kind, model_dir, inputs, **job):
    from helpers import run_job, write_job

    outcomes = {}
    for packing in ("off", "on"):
        spec, out = write_job(str(tmp_path / packing), kind, model_dir, inputs, **job)
        code, events, err = run_job(capsys, spec, "--device", "cpu", "--packing", packing)
        assert code == 0, err
        outcomes[packing] = ([e["data"] for e in events if e["type"] == "gradient_step"], events[-1]["metrics"], adapter_tensors(out))
    return outcomes


def assert_same_training(outcomes, keys):
    (steps_off, metrics_off, adapter_off), (steps_on, metrics_on, adapter_on) = outcomes["off"], outcomes["on"]
    assert len(steps_on) == len(steps_off) >= 1
    for a, b in zip(steps_off, steps_on):
        for key in keys:
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    assert adapter_on.keys() == adapter_off.keys()
    # Adam divides each gradient by its own magnitude, so a weight whose gradient is ~0 moves by float noise times the
    # learning rate (1e-3): allow 1% of one step.
    for name in adapter_off:
        torch.testing.assert_close(adapter_on[name], adapter_off[name], rtol=1e-4, atol=1e-5)


def test_an_rl_job_packed_trains_the_adapter_and_metrics_of_one_forward_per_sequence(tmp_path, capsys, model_dir, tokenizer):
    outcomes = run_both(tmp_path, capsys, "rl", model_dir, rl_groups(tokenizer), config={"learning_rate": 1e-3})
    assert_same_training(outcomes, ["loss", "grad_norm", "entropy", "probs_corr", "importance_ratio_mean", "num_tokens", "num_trainable_tokens"])


def test_an_rl_job_with_kl_and_sequence_level_ratios_is_the_same_packed(tmp_path, capsys, model_dir, tokenizer):
    config = {"learning_rate": 1e-3, "kl_penalty_coef": 0.1, "importance_sampling_level": "sequence", "precalculate_logprobs": True}
    outcomes = run_both(tmp_path, capsys, "rl", model_dir, rl_groups(tokenizer), config=config)
    assert_same_training(outcomes, ["loss", "grad_norm", "entropy", "kl_policy_ref", "importance_ratio_mean"])


def test_an_sft_job_packed_trains_the_adapter_of_one_forward_per_sequence(tmp_path, capsys, model_dir):
    rows = [{"messages": [{"role": "user", "content": " ".join(WORDS[: 1 + k % 5])}, {"role": "assistant", "content": " ".join(WORDS[k % 7 :])}]}
            for k in range(10)]
    outcomes = run_both(tmp_path, capsys, "sft", model_dir, rows, sft_config={"batch_size": 4, "learning_rate": 1e-3})
    assert_same_training(outcomes, ["loss", "grad_norm", "num_tokens"])


def test_probs_corr_is_one_when_engine_and_trainer_agree_even_with_a_one_token_completion(tmp_path, capsys, model_dir, tokenizer, model):
    """The correlation is ART's: one Pearson over the row's sampled positions. A one-token completion has no
    correlation of its own and must not pull the step's value down (it used to count as 0: 60/61 for 61 tokens)."""
    from helpers import run_job, write_job

    base = load_model(model_dir, None, Options(device="cpu"), torch.device("cpu"))  # a zero adapter: the base model
    groups = rl_groups(tokenizer, base)
    assert any(len(t["messages_and_choices"][-1]["logprobs"]["content"]) == 1 for g in groups for t in g["trajectories"])
    for packing in ("on", "off"):
        spec, _ = write_job(str(tmp_path / packing), "rl", model_dir, groups, config={"learning_rate": 1e-3})
        code, events, err = run_job(capsys, spec, "--device", "cpu", "--packing", packing)
        assert code == 0, err
        first = next(e["data"] for e in events if e["type"] == "gradient_step")
        assert first["importance_ratio_mean"] == pytest.approx(1.0, abs=1e-5)
        assert first["probs_corr"] == pytest.approx(1.0, abs=1e-6)
