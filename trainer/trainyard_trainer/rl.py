"""One RL training step (art-trainer.md §1, §7): tokenize, advantages, normalise, pack, then one optimizer step per
packed row (per `world_size` rows with several processes), and the new checkpoint."""
from __future__ import annotations

import contextlib
import math
import os
import random
import time
from typing import Any

import torch

from . import distributed, events
from .batch import normalise, pack, row_length, tokenize_groups
from .config import ConfigError, RLConfig, parse_rl_config
from .loss import LossTerms, combine, metrics_from_sums, rl_loss
from .model import Options, adapter_loading, as_tensor, check_adapter, copy_checkpoint, local_path, packed_logprobs, save_adapter, trainable_parameters
from .packing import Pack, plan
from .source import ColdSource
from .tokenize import InputError, TokenizedResult

# ART's RL optimizer (art-trainer.md §1.8): AdamW betas (0.9, 0.99), eps 1e-8, weight decay 0.1, clip 0.1, constant LR.
BETAS = (0.9, 0.99)
EPS = 1e-8
WEIGHT_DECAY = 0.1
MAX_GRAD_NORM = 0.1


def make_optimizer(params: list[torch.nn.Parameter], lr: float, weight_decay: float, fused: bool = True) -> torch.optim.AdamW:
    """ART's AdamW. `fused`: torch's fused kernel, one pass over all the LoRA tensors per step (a few kernel launches
    instead of one per operation and tensor group), on the devices that have it (CUDA and CPU); else torch's default."""
    fused = fused and bool(params) and all(p.device.type in ("cuda", "cpu") for p in params)
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay, fused=fused or None)


class Diverged(ConfigError):
    """Training that became non-finite (exit 3): the same job and learning rate diverge again when retried."""


def finite_step(step: int, loss: float, grad_norm: torch.Tensor, lr: float) -> float:
    """The gradient norm of gradient step `step` (from 1) as a float, checked with the loss before the optimizer
    applies the step: a non-finite one fails the job, as clipping would turn every gradient into NaN."""
    norm = float(grad_norm)
    if not (math.isfinite(loss) and math.isfinite(norm)):
        raise Diverged(f"training diverged: the loss or its gradient became non-finite at gradient step {step} (loss {loss}, gradient norm {norm}); "
                       f"the learning rate ({lr:g}) may be too high")
    return norm


def check_finite_weights(params: list[torch.nn.Parameter], steps: int, lr: float) -> None:
    """Fails the job before its adapter is saved when the last optimizer step made a weight non-finite (its loss and
    gradients were finite: only the next step's would show it)."""
    if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
        raise Diverged(f"training diverged: the adapter's weights became non-finite after gradient step {steps}; "
                       f"the learning rate ({lr:g}) may be too high")


def step_learning_rate(config: RLConfig, step_rows: list[list[TokenizedResult]]) -> float:
    """learning_rate · K^p with K the completions in the row (the mean over the step's rows with several processes).
    ART bounds p no more than the server does (any finite number), and K^p is harmless for K = 1, so a p whose K^p
    leaves the floats for this batch's rows is refused by the key's name (exit 3) rather than by bounding it: Python's
    float power raises OverflowError there (a traceback, exit 1, retried to the same end)."""
    power = config.num_trajectories_learning_rate_multiplier_power
    try:
        lr = config.learning_rate * sum(len(row) ** power for row in step_rows) / len(step_rows)
    except OverflowError:
        lr = math.inf
    if not math.isfinite(lr):
        raise ConfigError(f"experimental_config.num_trajectories_learning_rate_multiplier_power {power!r} makes the learning rate "
                          f"(learning_rate · K^p) overflow for a row of K = {max(len(row) for row in step_rows)} sequences")
    return lr


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Continues a saved state in `optimizer`'s implementation, whichever one saved it: the moments and step counts are
    the same, only `fused`/`foreach` (which loading would otherwise take from the saved groups) are kept."""
    groups = [{**saved, "fused": group["fused"], "foreach": group["foreach"]} for saved, group in zip(state["param_groups"], optimizer.param_groups, strict=True)]
    optimizer.load_state_dict({**state, "param_groups": groups})


def reference_adapter(config: RLConfig, spec: dict[str, Any]) -> tuple[bool, str | None]:
    """(KL on, reference adapter directory or None for the base model with the LoRA disabled)."""
    if config.kl_penalty_coef <= 0:
        return False, None
    if config.kl_ref_adapter_path is not None:
        if not os.path.isfile(os.path.join(config.kl_ref_adapter_path, "adapter_config.json")):
            raise ConfigError(f"experimental_config.kl_ref_adapter_path {config.kl_ref_adapter_path!r} is not an adapter directory")
        check_adapter(config.kl_ref_adapter_path, f"experimental_config.kl_ref_adapter_path {config.kl_ref_adapter_path!r}")
        return True, config.kl_ref_adapter_path
    base_step = (spec.get("base_checkpoint") or {}).get("step") or 0
    if config.kl_penalty_step_lag is not None:
        step, key = max(0, base_step - config.kl_penalty_step_lag), "kl_penalty_step_lag"
    elif config.kl_penalty_reference_step is not None:
        step, key = config.kl_penalty_reference_step, "kl_penalty_reference_step"
    else:
        return True, None
    if "kl_reference_checkpoint" in spec:
        # The server resolved the step to one of the model's checkpoints, wherever it lives (trained on another
        # worker, imported), and keeps it while the job needs it; null: step 0, the base model.
        checkpoint = spec["kl_reference_checkpoint"]
        if checkpoint is None:
            return True, None
        uri, step = checkpoint["uri"], checkpoint["step"]
        path = local_path(uri)
        label = f"experimental_config.{key}: the checkpoint of step {step}"
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise ConfigError(f"{label} is not an adapter directory this machine can read")
        check_adapter(path, label)
        return True, path
    if step == 0:
        return True, None  # the step-0 adapter is zero: identical to the base model
    # A spec from a server that does not resolve the reference: checkpoints of one model trained by this
    # worker sit side by side, <output-dir>/<model id>/step-<N> (docs/worker-runtime.md).
    path = os.path.join(os.path.dirname(os.path.abspath(spec["output_dir"])), f"step-{step}")
    if step > base_step or not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise ConfigError(f"experimental_config.{key}: no checkpoint of step {step} at {path}")
    check_adapter(path, f"experimental_config.{key}: the checkpoint of step {step} at {path!r}")
    return True, path


def _pack_tensors(results: list[TokenizedResult], device: torch.device) -> dict[str, torch.Tensor]:
    """The aligned per-position tensors of sequences packed in a row (position t scores token t+1 of its sequence),
    with a segment id per sequence for sequence-level importance sampling."""
    mask, old, adv, w, seg = [], [], [], [], []
    for k, r in enumerate(results):
        n = len(r.token_ids) - 1
        mask += r.mask[1:]
        old += r.logprobs[1:]
        adv += [r.advantage] * n
        w += [r.weight] * n
        seg += [k] * n
    return {
        "mask": as_tensor(mask, torch.float32, device),
        "old": as_tensor(old, torch.float32, device),
        "adv": as_tensor(adv, torch.float32, device),
        "w": as_tensor(w, torch.float32, device),
        "seg": as_tensor(seg, torch.long, device),
    }


def _packs(row: list[TokenizedResult], capacity: int, options: Options) -> list[list[TokenizedResult]]:
    """The forwards of one row: its results packed up to `capacity` tokens each (whole sequences, each with its own
    prompt: the row plan counts a shared prompt once, so one row can take more than one forward)."""
    packs: list[Pack] = plan([len(r.token_ids) for r in row], capacity, options.packing)
    return [[row[i] for i in p.members] for p in packs]


def _no_grad_logprobs(model: Any, rows: list[list[TokenizedResult]], capacity: int, options: Options, device: torch.device, chunk: int) -> dict[int, torch.Tensor]:
    """log p of every result's tokens under the model as it is now (no gradient), keyed by id(result)."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for row in rows:
            for together in _packs(row, capacity, options):
                logprobs, _, counts = packed_logprobs(model, [r.token_ids for r in together], device, chunk)
                for r, part in zip(together, logprobs.split(counts)):
                    out[id(r)] = part
    return out


@contextlib.contextmanager
def _adapter(model: Any, reference: str | None):
    """Runs the block under the KL reference: the base (LoRA disabled) or the loaded reference adapter."""
    if reference is None:
        with model.disable_adapter():
            yield
    else:
        model.set_adapter("reference")
        try:
            yield
        finally:
            model.set_adapter("default")
            for p in trainable_parameters(model):
                p.requires_grad_(True)


def run(spec: dict[str, Any], groups: list[Any], options: Options, device: torch.device, base_adapter: str | None, source: Any = None) -> None:
    source = source or ColdSource()
    config = parse_rl_config((spec.get("config") or {}).get("experimental_config"))
    base_model = spec["model"]["base_model"]
    output_dir = spec["output_dir"]
    kl_on, reference = reference_adapter(config, spec)
    tokenizer = source.tokenizer(base_model)
    rng = random.Random(options.seed)
    grouped, stats = tokenize_groups(tokenizer, groups, config, rng, vocab_size=source.vocab_size(base_model))
    seq_len = row_length(grouped, config, options.max_seq_length)
    rows, dropped = pack(grouped, seq_len, rng)
    normalise(rows, config.advantage_balance)
    results = [r for row in rows for r in row]
    trainer_tokens = sum(sum(r.mask[1:]) for r in results)
    has_logprobs = any(not math.isnan(lp) for r in results for lp in r.logprobs)
    data_metrics = {
        "data/step_num_groups_submitted": stats.num_groups,
        "data/step_num_groups_trainable": stats.num_groups_trainable,
        "data/step_num_trajectories": stats.num_trajectories,
        "data/step_trainer_tokens": trainer_tokens,
        "data/step_num_dropped_too_long": dropped,
    }
    if trainer_tokens and not (has_logprobs or config.allow_training_without_logprobs):
        # Tokens to train but no sampler logprob anywhere (entries whose `logprob` is null): ART trains nothing then,
        # and completing the step unchanged would hide that rewards which differ were lost (as in tokenize_groups).
        first = min(results, key=lambda r: r.trajectory)
        raise InputError(f"{first.where}: its Choices' logprobs hold no values (`logprob` is null), nor do any others in the batch: request "
                         "logprobs=True from the engine, or set allow_training_without_logprobs to train them with ratio 1 "
                         "(its group's rewards differ, yet nothing would be trained)")
    if not results or trainer_tokens == 0:
        # Nothing to train: no optimizer step, the checkpoint carried forward (a fresh zero adapter at step 0).
        events.training_started(0)
        if events.is_main_process():
            if base_adapter is not None:
                copy_checkpoint(base_adapter, output_dir)
            else:
                save_adapter(source.model(base_model, None, options, device), output_dir, base_model, None)
        events.checkpoint(output_dir, {**data_metrics, "data/step_num_gradient_steps": 0})
        return
    world = distributed.world_size()
    steps = [rows[k : k + world] for k in range(0, len(rows), world)]
    lrs = [step_learning_rate(config, step_rows) for step_rows in steps]  # refused before anything is loaded or trained

    model = source.model(base_model, base_adapter, options, device)
    if kl_on and reference is not None:
        with adapter_loading(reference, base_model):
            model.load_adapter(reference, adapter_name="reference", is_trainable=False)
        model.set_adapter("default")
    params = trainable_parameters(model)
    optimizer = make_optimizer(params, config.learning_rate, WEIGHT_DECAY, options.fused_adamw)
    state = source.optimizer_state(base_adapter, "rl")
    if state is not None:
        load_optimizer(optimizer, state)
    chunk = config.logprob_calculation_chunk_size
    capacity = options.pack_length or seq_len

    # Per-result tensors computed without gradient before training: reference logprobs (KL) and, with
    # precalculate_logprobs, the pre-update policy's logprobs (which become the old ones; the sampler's are kept for TIS).
    refs: dict[int, torch.Tensor] = {}
    recomputed: dict[int, torch.Tensor] = {}
    if kl_on:
        with _adapter(model, reference):
            refs = _no_grad_logprobs(model, rows, capacity, options, device, chunk)
    if config.precalculate_logprobs:
        recomputed = _no_grad_logprobs(model, rows, capacity, options, device, chunk)

    events.training_started(len(steps))
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for n, step_rows in enumerate(steps, 1):
        started = time.perf_counter()
        mine = step_rows[distributed.rank()] if distributed.rank() < len(step_rows) else []
        step_tokens = sum(sum(r.mask[1:]) for row in step_rows for r in row)
        lr = lrs[n - 1]
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=False)
        kl_mean = None
        if kl_on and mine:
            kl_mean = _row_kl_mean(model, mine, refs, recomputed, config, capacity, options, device, chunk)
        row_terms: list[LossTerms] = []
        for together in _packs(mine, capacity, options):
            t = _pack_tensors(together, device)
            new, entropy, _ = packed_logprobs(model, [r.token_ids for r in together], device, chunk)
            old, original = t["old"], None
            if config.precalculate_logprobs:
                old, original = torch.cat([recomputed[id(r)] for r in together]), t["old"]
            ref = torch.cat([refs[id(r)] for r in together]) if kl_on else None
            terms = rl_loss(new, old, t["mask"], t["adv"], t["w"], config, segment_ids=t["seg"], ref_logprobs=ref,
                            original_logprobs=original, entropies=entropy, kl_mean=kl_mean)
            (terms.numerator / step_tokens).backward()
            row_terms.append(terms)
        # Read the row's values only now: a read waits for the GPU, and between a forward and its backward pass (or
        # between packs) it would stall the pipeline.
        sums = combine(row_terms)
        sums["num_tokens"] = float(sum(len(r.token_ids) for r in mine))
        if kl_on:
            sums.setdefault("kl", 0.0)
        sums = distributed.all_reduce_sums(_with_metric_keys(sums), params)
        grad_norm = finite_step(n, sums["loss"] / step_tokens, torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM), config.learning_rate)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the step's time includes its queued GPU work
        elapsed = time.perf_counter() - started
        data = {
            "loss": sums["loss"] / step_tokens,
            "grad_norm": grad_norm,
            "learning_rate": config.learning_rate,
            **metrics_from_sums(sums),
            "num_tokens": sums["num_tokens"],
            "num_trainable_tokens": step_tokens,
            "tokens_per_second": sums["num_tokens"] / elapsed if elapsed > 0 else 0.0,
        }
        events.gradient_step(data)
        for key, value in data.items():
            totals[key] = totals.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    check_finite_weights(params, len(steps), config.learning_rate)

    if events.is_main_process():
        if kl_on and reference is not None:
            model.delete_adapter("reference")
        saved_state = {"kind": "rl", "state": optimizer.state_dict()}
        with events.timed("save_seconds"):
            save_adapter(model, output_dir, base_model, saved_state)
        source.saved(model, output_dir, saved_state)
    distributed.barrier()
    names = {"loss": "loss/train", "grad_norm": "loss/grad_norm", "learning_rate": "loss/learning_rate", "entropy": "loss/entropy",
             "kl_policy_ref": "loss/kl_policy_ref", "probs_corr": "loss/probs_corr", "tokens_per_second": "throughput/train_packed_tok_per_s"}
    # A metric is the mean over the gradient steps that report it (probs_corr is undefined for a row with fewer than two
    # sampled positions, and such a row does not count as 0).
    metrics = {name: totals[key] / counts[key] for key, name in names.items() if key in totals}
    events.checkpoint(output_dir, {**metrics, **data_metrics, "data/step_num_gradient_steps": len(steps)})


METRIC_SUMS = ("loss", "tokens", "counted", "ratio", "clipped", "entropy", "corr_n", "corr_a", "corr_b", "corr_aa", "corr_bb", "corr_ab")


def _with_metric_keys(sums: dict[str, float]) -> dict[str, float]:
    """Every process reduces the same keys, including one whose row is empty or has no entropy."""
    return {key: sums.get(key, 0.0) for key in (*METRIC_SUMS, *sums)}


def _row_kl_mean(model, row, refs, recomputed, config, capacity, options, device, chunk) -> float:
    """k̄ over the packed row: Σ (s − ref)·m / Σ m, with s the sampler's or the current learner's logprobs."""
    total, count = 0.0, 0.0
    with torch.no_grad():
        for together in _packs(row, capacity, options):
            t = _pack_tensors(together, device)
            ref = torch.cat([refs[id(r)] for r in together])
            if config.kl_penalty_source == "sample" and config.precalculate_logprobs:
                source = torch.cat([recomputed[id(r)] for r in together])  # the pre-update policy's: the old logprobs
            else:
                learner = packed_logprobs(model, [r.token_ids for r in together], device, chunk)[0]
                sample = config.kl_penalty_source == "sample"
                source = torch.where(torch.isfinite(t["old"]), t["old"], learner) if sample else learner
            m = t["mask"]
            total += float(((source - ref) * m).sum())
            count += float(m.sum())
    return total / count if count else 0.0
