"""Loading the base model with a LoRA adapter, chunked log-probabilities, saving adapters and optimizer state."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from .config import ConfigError

# ART's Unsloth defaults (art-trainer.md §4): r 8, alpha 16, dropout 0, the seven projections of dense models.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OPTIMIZER_FILE = "optimizer.pt"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass
class Options:
    device: str = "auto"  # auto | cpu | cuda
    lora_rank: int = 8
    lora_alpha: int = 16
    gradient_checkpointing: bool | None = None  # None: on for CUDA, off on CPU
    max_seq_length: int = 32768
    seed: int = 0


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but CUDA is not available")
    if name.startswith("cuda") and "LOCAL_RANK" in os.environ:
        return torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}")
    return torch.device(name)


def load_tokenizer(base_model: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(base_model)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot load the tokenizer of base model {base_model!r}: {error}") from error


def load_model(base_model: str, adapter_dir: str | None, options: Options, device: torch.device) -> Any:
    """The base model (bf16 on CUDA, fp32 on CPU) with a trainable LoRA: the adapter in `adapter_dir`, else a fresh
    zero-initialised one (B = 0, identical to the base: step 0)."""
    return attach_lora(load_base(base_model, device), base_model, adapter_dir, options, device)


def load_base(base_model: str, device: torch.device) -> Any:
    """The base model alone, on `device` (bf16 on CUDA, fp32 on CPU), without a LoRA."""
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot load base model {base_model!r}: {error}") from error
    model.config.use_cache = False
    return model.to(device)


def attach_lora(model: Any, base_model: str, adapter_dir: str | None, options: Options, device: torch.device) -> Any:
    """Wraps a base model from `load_base` in a trainable LoRA: the adapter in `adapter_dir`, else a fresh one whose
    A matrices are drawn from the RNG seeded with `options.seed`."""
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(options.seed)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    else:
        present = sorted({name.rsplit(".", 1)[-1] for name, _ in model.named_modules()} & set(LORA_TARGETS))
        if not present:
            raise ConfigError(f"base model {base_model!r} has none of the LoRA target modules {', '.join(LORA_TARGETS)}")
        config = LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha, lora_dropout=0.0, bias="none", target_modules=present, task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
    model.to(device)
    checkpointing = options.gradient_checkpointing if options.gradient_checkpointing is not None else device.type == "cuda"
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for _, p in sorted(model.named_parameters(), key=lambda item: item[0]) if p.requires_grad]


def as_tensor(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list on `device`. On CUDA the copy goes through pinned memory without blocking: a plain copy from pageable
    memory waits for all queued GPU work, which would stall the pipeline between sequences."""
    tensor = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def hidden_states(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Last hidden states [1, S, H] with per-sequence positions (0..S-1), without materialising the logits."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = causal_lm.get_decoder()
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    return decoder(input_ids=input_ids, position_ids=positions, use_cache=False).last_hidden_state


def _chunk_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    log_norm = torch.logsumexp(logits, dim=-1)
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        entropy = log_norm - (probs * logits).sum(-1)
    return chosen, entropy


def token_logprobs(model: Any, token_ids: list[int], device: torch.device, chunk_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token t | tokens < t) for t = 1..S-1, and the full-vocabulary entropy at each of those positions.

    The lm_head and the log-softmax (fp32) run over chunks of `chunk_size` positions; under gradient checkpointing
    each chunk's logits are recomputed in the backward pass instead of being kept, so a long sequence never holds
    S x vocab logits."""
    ids = as_tensor([token_ids], torch.long, device)
    hidden = hidden_states(model, ids)[0, :-1]
    targets = ids[0, 1:]
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = causal_lm.get_output_embeddings()
    logprobs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        h, t = hidden[start : start + chunk_size], targets[start : start + chunk_size]
        if torch.is_grad_enabled() and hidden.requires_grad:
            lp, ent = checkpoint(_chunk_logprobs, head, h, t, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(head, h, t)
        logprobs.append(lp)
        entropies.append(ent)
    return torch.cat(logprobs), torch.cat(entropies)


def save_adapter(model: Any, output_dir: str, base_model: str, optimizer_state: dict[str, Any] | None) -> None:
    """A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) that peft and vLLM load, and the
    optimizer state for the next step next to it."""
    os.makedirs(output_dir, exist_ok=True)
    model.peft_config["default"].base_model_name_or_path = base_model
    model.save_pretrained(output_dir, safe_serialization=True)
    if optimizer_state is not None:
        torch.save(optimizer_state, os.path.join(output_dir, OPTIMIZER_FILE))


def copy_checkpoint(source: str, output_dir: str) -> None:
    """Carry a checkpoint forward unchanged (a step with nothing to train), optimizer state included."""
    os.makedirs(output_dir, exist_ok=True)
    for name in (*ADAPTER_FILES, OPTIMIZER_FILE):
        path = os.path.join(source, name)
        if os.path.exists(path):
            shutil.copy2(path, os.path.join(output_dir, name))


def load_optimizer_state(adapter_dir: str | None, kind: str) -> dict[str, Any] | None:
    """The optimizer state saved with `adapter_dir` when it came from the same kind of training (ART resets the
    Adam state when switching between RL and SFT)."""
    if adapter_dir is None:
        return None
    path = os.path.join(adapter_dir, OPTIMIZER_FILE)
    if not os.path.exists(path):
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    return saved["state"] if saved.get("kind") == kind else None
