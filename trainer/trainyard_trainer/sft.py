"""SFT (art-trainer.md §3): batches of rows in order, loss only on assistant turns, one optimizer step per batch."""
from __future__ import annotations

import time
from typing import Any

import torch

from . import events
from .config import ConfigError, parse_sft_config
from .model import Options, as_tensor, packed_logprobs, save_adapter, trainable_parameters
from .packing import plan
from .rl import check_finite_weights, finite_step, load_optimizer, make_optimizer
from .source import ColdSource
from .tokenize import InputError, sft_sequence

MAX_GRAD_NORM = 1.0
WEIGHT_DECAY = 0.0


def run(spec: dict[str, Any], rows: list[Any], options: Options, device: torch.device, base_adapter: str | None, source: Any = None) -> None:
    source = source or ColdSource()
    job_config = spec.get("config") or {}
    config = parse_sft_config(job_config.get("sft_config"), job_config.get("experimental_config"))
    base_model = spec["model"]["base_model"]
    tokenizer = source.tokenizer(base_model)
    sequences, dropped = [], 0
    for i, row in enumerate(rows):
        seq = sft_sequence(tokenizer, row, config.assistant_turns, where=f"inputs line {i + 1}")
        if len(seq.token_ids) > options.max_seq_length:
            dropped += 1
            continue
        sequences.append(seq)
    batches = [sequences[k : k + config.batch_size] for k in range(0, len(sequences), config.batch_size)]
    # Batches without a trainable token are skipped and do not consume a learning-rate entry.
    batches = [b for b in batches if sum(sum(s.mask[1:]) for s in b)]
    if not batches:
        # A checkpoint of an untrained adapter would report a loss of 0 and win "best by lowest loss".
        untrained = sum(1 for seq in sequences if not sum(seq.mask[1:]))
        raise InputError(f"no SFT row has a token to train: of {len(rows)} rows, {dropped} are longer than the maximum sequence length "
                         f"({options.max_seq_length} tokens) and were dropped, and {untrained} have no assistant turn to train")
    if isinstance(config.learning_rate, list) and len(config.learning_rate) < len(batches):
        raise ConfigError(f"sft_config.learning_rate has {len(config.learning_rate)} entries for {len(batches)} batches")

    model = source.model(base_model, base_adapter, options, device)
    params = trainable_parameters(model)
    first_lr = config.learning_rate[0] if isinstance(config.learning_rate, list) else config.learning_rate
    optimizer = make_optimizer(params, first_lr, WEIGHT_DECAY, options.fused_adamw)
    state = source.optimizer_state(base_adapter, "sft")
    if state is not None:
        load_optimizer(optimizer, state)

    # SFT has no row plan: a forward packs up to --pack-length tokens, by default the longest sequence rounded up to 2048.
    longest = max((len(seq.token_ids) for seq in sequences), default=1)
    capacity = options.pack_length or min(-(-longest // 2048) * 2048, options.max_seq_length)

    events.training_started(len(batches))
    totals: dict[str, float] = {}
    for b, batch in enumerate(batches):
        started = time.perf_counter()
        lr = config.learning_rate[b] if isinstance(config.learning_rate, list) else config.learning_rate
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=False)
        trainable = sum(sum(s.mask[1:]) for s in batch)
        losses = []
        for pack in plan([len(seq.token_ids) for seq in batch], capacity, options.packing):
            seqs = [batch[i] for i in pack.members]
            logprobs, _, _ = packed_logprobs(model, [seq.token_ids for seq in seqs], device)
            mask = as_tensor([m for seq in seqs for m in seq.mask[1:]], torch.float32, device)
            loss = -(logprobs * mask).sum() / trainable  # the token-mean cross-entropy over the whole batch
            loss.backward()
            losses.append(loss.detach())  # read after the batch: a read waits for the GPU
        total = sum(float(loss) for loss in losses)
        grad_norm = finite_step(b + 1, total, torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM), lr)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the step's time includes its queued GPU work
        elapsed = time.perf_counter() - started
        tokens = sum(len(s.token_ids) for s in batch)
        data = {
            "loss": total,
            "grad_norm": grad_norm,
            "learning_rate": lr,
            "num_trajectories": len(batch),
            "num_tokens": tokens,
            "num_trainable_tokens": trainable,
            "num_dropped_trajectories": dropped if b == 0 else 0,
            "tokens_per_second": tokens / elapsed if elapsed > 0 else 0.0,
        }
        events.gradient_step(data)
        for key in ("loss", "grad_norm", "learning_rate", "tokens_per_second"):
            totals[key] = totals.get(key, 0.0) + data[key]
    check_finite_weights(params, len(batches), lr)
    if events.is_main_process():
        saved_state = {"kind": "sft", "state": optimizer.state_dict()}
        with events.timed("save_seconds"):
            save_adapter(model, spec["output_dir"], base_model, saved_state)
        source.saved(model, spec["output_dir"], saved_state)
    n = len(batches)
    metrics = {"loss/train": totals["loss"] / n, "loss/grad_norm": totals["grad_norm"] / n,
               "loss/learning_rate": totals["learning_rate"] / n, "throughput/train_tok_per_s": totals["tokens_per_second"] / n,
               "data/step_num_gradient_steps": len(batches), "data/step_num_dropped_trajectories": dropped}
    events.checkpoint(spec["output_dir"], metrics)
