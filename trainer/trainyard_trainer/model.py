"""Loading the base model with a LoRA adapter, chunked log-probabilities, saving adapters and optimizer state."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from . import packing
from .config import ConfigError, UnfitMachine

# ART's Unsloth defaults (art-trainer.md §4): r 8, alpha 16, dropout 0, the seven projections of dense models.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OPTIMIZER_FILE = "optimizer.pt"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# LoRA initialisations that leave the base model's weights alone when an adapter is loaded (PiSSA, OLoRA, CorDA, LoftQ
# and the like rewrite them, on every load).
BASE_PRESERVING_INITS = (True, False, "gaussian", "eva", "orthogonal")


@dataclass
class Options:
    device: str = "auto"  # auto | cpu | cuda
    lora_rank: int = 8
    lora_alpha: int = 16
    gradient_checkpointing: bool | None = None  # None: on CUDA, per forward, on when its activations would not fit; off on CPU
    max_seq_length: int = 32768
    seed: int = 0
    packing: bool = True  # several sequences per forward pass (packing.py); off: one sequence per forward
    pack_length: int | None = None  # tokens per packed forward; None: the RL row length (SFT: the longest sequence, rounded up to 2048)
    lora_dtype: str = "auto"  # the LoRA matmuls' compute dtype: bf16 (autocast, fp32 master weights), fp32, or auto (bf16 on CUDA)
    compile_logprobs: bool | None = None  # torch.compile the lm_head + log-softmax chunks; None: on with CUDA
    compile_layers: bool | None = None  # torch.compile each decoder layer (fewer kernel launches); None: on with CUDA
    attention: str = "sdpa"  # CUDA rows of one sequence: sdpa (cuDNN first) or varlen flash attention; packed rows: varlen
    fused_logprobs: bool = True  # the lm_head's backward folded into its forward (_HeadLogprobs); off: logits recomputed in the backward
    fused_adamw: bool = True  # torch's fused AdamW kernel where the device has one; off: torch's default implementation
    cuda_graphs: bool = False  # compiled decoder layers replayed as CUDA graphs (mode reduce-overhead); implies compile_layers
    length_bucket: int = 256  # with cuda_graphs: a forward's tokens are padded up to a multiple of this (one graph per bucket)


def pick_device(name: str) -> torch.device:
    """The device `--device name` asks for. One this machine lacks raises UnfitMachine (exit 4), not ConfigError: a
    broken driver or a container started without GPUs is the machine's fault, and failing each job for good would
    empty the queue into FAILED while other workers could train it."""
    requested = name
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UnfitMachine(f"--device {requested} was asked for but CUDA is not available on this machine")
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if name.startswith("cuda") and "LOCAL_RANK" in os.environ else name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UnfitMachine(f"--device {requested} needs {device}, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def load_tokenizer(base_model: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(base_model)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot load the tokenizer of base model {base_model!r}: {error}") from error


def load_vocab_size(base_model: str) -> int:
    """The rows of the base model's token embedding, read from its config without loading the weights."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(base_model)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot load the config of base model {base_model!r}: {error}") from error
    return config.get_text_config().vocab_size


def load_model(base_model: str, adapter_dir: str | None, options: Options, device: torch.device) -> Any:
    """The base model (bf16 on CUDA, fp32 on CPU) with a trainable LoRA: the adapter in `adapter_dir`, else a fresh
    zero-initialised one (B = 0, identical to the base: step 0)."""
    return attach_lora(load_base(base_model, device), base_model, adapter_dir, options, device)


def load_base(base_model: str, device: torch.device) -> Any:
    """The base model alone, on `device` (bf16 on CUDA, fp32 on CPU), without a LoRA."""
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype, attn_implementation=packing.register())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot load base model {base_model!r}: {error}") from error
    model.config.use_cache = False
    return model.to(device)


def local_path(uri: str) -> str:
    """A checkpoint URI as a path on this machine: a `file://` URL decoded (the server writes a space in a path as
    `%20`), anything else as it is."""
    if uri.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return uri


def check_adapter(adapter_dir: str, label: str) -> None:
    """Refuses, before anything is loaded, an adapter directory without its files or an adapter that is more than LoRA
    matrices beside the base model: one that trains or replaces base modules (`modules_to_save`, `bias`,
    `trainable_token_indices`), changes the base model as it loads (`layer_replication`, initialisations that rewrite
    base weights), or is not a LoRA at all; and a LoRA that vLLM refuses to serve (`use_dora`, `lora_bias`). Taking
    the LoRA off again (`unload()`) would leave such changes in a base model that a resident trainer keeps for the next
    job, and vLLM serves its LoRAs on one shared, unchanged base. `label` names the adapter in the messages (the spec field and its value)."""
    for name in ADAPTER_FILES:
        if not os.path.isfile(os.path.join(adapter_dir, name)):
            raise ConfigError(f"{label} has no {name}")
    try:
        with open(os.path.join(adapter_dir, "adapter_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{label}: cannot read adapter_config.json: {error}") from error
    if not isinstance(config, dict):
        raise ConfigError(f"{label}: adapter_config.json is not a JSON object")
    refused = []
    if config.get("peft_type") != "LORA":
        refused.append(f"peft_type {config.get('peft_type')!r} (only LORA)")
    for key in ("modules_to_save", "trainable_token_indices", "layer_replication", "use_dora", "lora_bias"):
        if config.get(key):
            refused.append(f"{key} {config[key]!r}")
    if config.get("bias", "none") != "none":
        refused.append(f"bias {config['bias']!r}")
    if config.get("init_lora_weights", True) not in BASE_PRESERVING_INITS:
        refused.append(f"init_lora_weights {config['init_lora_weights']!r}")
    if refused:
        raise ConfigError(f"{label} is an adapter with {', '.join(refused)}: this trainer takes plain LoRA adapters, which leave "
                          "the base model unchanged (a resident trainer keeps it for the next job) and which vLLM serves")


@contextlib.contextmanager
def adapter_loading(adapter_dir: str, base_model: str):
    """An adapter that does not load onto the base model (another model's shapes, unreadable weights) raises a
    ConfigError that names it and the reason on one line; running out of memory or a device error stays retryable."""
    from safetensors import SafetensorError

    try:
        yield
    except (torch.OutOfMemoryError, torch.AcceleratorError):
        raise
    except (RuntimeError, ValueError, KeyError, OSError, SafetensorError) as error:
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        if len(reason) > 400:
            reason = reason[:400] + " ..."
        raise ConfigError(f"adapter {adapter_dir!r} does not load onto base model {base_model!r}: {reason}") from error


def attach_lora(model: Any, base_model: str, adapter_dir: str | None, options: Options, device: torch.device) -> Any:
    """Wraps a base model from `load_base` in a trainable LoRA: the adapter in `adapter_dir` (which `check_adapter`
    accepted), else a fresh one whose A matrices are drawn from the RNG seeded with `options.seed`."""
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(options.seed)
    if adapter_dir is not None:
        with adapter_loading(adapter_dir, base_model):
            model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    else:
        present = sorted({name.rsplit(".", 1)[-1] for name, _ in model.named_modules()} & set(LORA_TARGETS))
        if not present:
            raise ConfigError(f"base model {base_model!r} has none of the LoRA target modules {', '.join(LORA_TARGETS)}")
        config = LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha, lora_dropout=0.0, bias="none", target_modules=present, task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
    model.to(device)
    causal_lm = model.get_base_model()
    model.trainyard_checkpointing = None  # whether the layers checkpoint now
    model.trainyard_activation_budget = None  # bytes of activations a forward may keep (auto checkpointing), or None
    if options.gradient_checkpointing is not None:
        _set_checkpointing(model, options.gradient_checkpointing)
    elif device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        model.trainyard_activation_budget = ACTIVATION_SHARE * (free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
        _set_checkpointing(model, False)
    else:
        _set_checkpointing(model, False)
    lora_dtype = options.lora_dtype if options.lora_dtype != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    # bf16 LoRA compute as ART runs it (autocast): the fp32 LoRA weights are cast to bf16 once per forward instead of
    # every bf16 activation being cast to fp32 for two small fp32 matmuls, on each of the LoRA projections. The
    # decoder's forward itself runs under autocast, so a plain model(...) call works too.
    model.trainyard_autocast = torch.bfloat16 if lora_dtype == "bf16" else None
    decoder = causal_lm.get_decoder()
    plain_forward = getattr(decoder, "trainyard_plain_forward", decoder.forward)  # a base model may be reused: wrap once
    decoder.trainyard_plain_forward = plain_forward
    decoder.forward = plain_forward if model.trainyard_autocast is None else torch.autocast(device.type, dtype=model.trainyard_autocast)(plain_forward)
    for module in model.modules():
        if hasattr(module, "cast_input_dtype_enabled"):
            module.cast_input_dtype_enabled = model.trainyard_autocast is None
    compile_chunks = options.compile_logprobs if options.compile_logprobs is not None else device.type == "cuda"
    model.trainyard_chunk_functions = _chunk_functions(compile_chunks)
    model.trainyard_fused_logprobs = options.fused_logprobs
    packing.probe(device)
    packing.single_sequence = options.attention
    model.trainyard_compiled_layers = []
    model.trainyard_length_bucket = options.length_bucket if options.cuda_graphs else None
    model.trainyard_graph_params = trainable_parameters(model) if options.cuda_graphs else []
    if options.cuda_graphs and device.type == "cuda":
        print("trainyard_trainer: --compile graphs is experimental and not yet verified on a GPU (docs/benchmarks.md)", file=sys.stderr)
    if options.cuda_graphs or (options.compile_layers if options.compile_layers is not None else device.type == "cuda"):
        # Each new LoRA (a new job's adapter on a base model kept loaded) recompiles the layer once, and with CUDA graphs
        # each padded length and sequence count does, twice (the first layer's input needs no gradient): past the limit
        # (default 8) new shapes would silently run eagerly.
        limit = 256 if options.cuda_graphs else 64
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
        if hasattr(torch._dynamo.config, "accumulated_recompile_limit"):
            torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 4 * limit)
        for layer in getattr(causal_lm.get_decoder(), "layers", []):
            if layer._compiled_call_impl is None:
                # reduce-overhead: inductor records each layer's forward and backward as CUDA graphs and replays them, one
                # launch per layer instead of one per kernel (not on a CPU, where it compiles alone). Its shapes are static,
                # one compile per padded length and sequence count: with dynamic shapes the first compiled backward pass
                # crashed (segmentation fault) on an H200 with torch 2.11 (docs/benchmarks.md).
                layer.compile(dynamic=not options.cuda_graphs, mode="reduce-overhead" if options.cuda_graphs else None)
            model.trainyard_compiled_layers.append(layer)
    model.train()
    return model


# Auto checkpointing keeps a forward's activations when they take at most this share of the GPU memory left after
# loading; the estimate per token and layer, 3 · (10 · hidden + 4 · intermediate) bytes, is about 1.5 times what a
# Qwen2.5-1.5B shape measured without checkpointing (26.4 GiB peak at 8,192 tokens, docs/benchmarks.md).
ACTIVATION_SHARE = 0.7


def _set_checkpointing(model: Any, on: bool) -> None:
    if model.trainyard_checkpointing == on:
        return
    causal_lm = model.get_base_model()
    if on and hasattr(causal_lm, "activation_checkpointing_enable"):  # transformers 5's name
        causal_lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif on:
        causal_lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:  # also when the state is unknown: a base model kept between jobs may still checkpoint from the last one
        (getattr(causal_lm, "activation_checkpointing_disable", None) or causal_lm.gradient_checkpointing_disable)()
    model.trainyard_checkpointing = on


def _checkpoint_if_needed(model: Any, tokens: int) -> None:
    """With auto checkpointing, recompute activations in the backward pass only when keeping them for `tokens` tokens
    would not fit: without it a step does a third less work (no second forward)."""
    budget = getattr(model, "trainyard_activation_budget", None)
    if budget is None:
        return
    config = model.get_base_model().config
    per_token = 3 * (10 * config.hidden_size + 4 * getattr(config, "intermediate_size", 4 * config.hidden_size)) * config.num_hidden_layers
    _set_checkpointing(model, tokens * per_token > budget)


def _uncompile_layers(model: Any, error: Exception) -> None:
    print(f"trainyard_trainer: compiled decoder layers unavailable ({type(error).__name__}); running eager", file=sys.stderr)
    for layer in model.trainyard_compiled_layers:
        layer._compiled_call_impl = None
    model.trainyard_compiled_layers = []
    model.trainyard_length_bucket = None  # no graphs to pad for


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for _, p in sorted(model.named_parameters(), key=lambda item: item[0]) if p.requires_grad]


def as_tensor(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list on `device`. On CUDA the copy goes through pinned memory without blocking: a plain copy from pageable
    memory waits for all queued GPU work, which would stall the pipeline between sequences."""
    tensor = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def _autocast(model: Any, device: torch.device):
    dtype = getattr(model, "trainyard_autocast", None)
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def hidden_states(model: Any, input_ids: torch.Tensor, lengths: list[int] | None = None, max_length: int | None = None) -> torch.Tensor:
    """Last hidden states [1, T, H] of one row holding the sequences of `lengths` (default: one sequence) back to back,
    each with its own positions 0..n-1 and attention within itself only; no logits are materialised. `max_length`: what
    varlen attention is told the longest sequence is (at least the longest; default: exactly it)."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = causal_lm.get_decoder()
    device = input_ids.device
    lengths = lengths or [input_ids.shape[1]]
    kwargs: dict[str, Any] = {}
    if len(lengths) == 1:
        positions = torch.arange(lengths[0], device=device).unsqueeze(0)
    else:
        positions = as_tensor([p for n in lengths for p in range(n)], torch.long, device).unsqueeze(0)
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        cu = as_tensor(offsets, torch.int32, device)
        longest = max_length or max(lengths)
        kwargs = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
    sdpa = device.type == "cuda" and len(lengths) == 1 and packing.single_sequence == "sdpa"
    with packing.sdpa_backends() if sdpa else contextlib.nullcontext():
        return decoder(input_ids=input_ids, position_ids=positions, use_cache=False, **kwargs).last_hidden_state


def _chunk_logprobs(weight: torch.Tensor, bias: torch.Tensor | None, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and the entropy at each position of a chunk, through the lm_head's `weight` and `bias`."""
    logits = F.linear(hidden, weight, bias).float()
    log_norm = torch.logsumexp(logits, dim=-1)
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        entropy = log_norm - (probs * logits).sum(-1)
    return chosen, entropy


def _chunk_logprobs_and_expected(weight: torch.Tensor, bias: torch.Tensor | None, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_chunk_logprobs` (without gradient) and Σ_v p_v · W_v at each position: what the backward pass of log p(target)
    needs besides W_target, so that it never recomputes the logits."""
    logits = F.linear(hidden, weight, bias).float()
    log_norm = torch.logsumexp(logits, dim=-1)
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    probs = torch.exp(logits - log_norm.unsqueeze(-1))
    entropy = log_norm - (probs * logits).sum(-1)
    expected = torch.matmul(probs.to(weight.dtype), weight)
    return chosen, entropy, expected


class _HeadLogprobs(torch.autograd.Function):
    """log p(target) through a frozen lm_head with its backward folded into the forward pass. With z = h·Wᵀ,
    ∂ log softmax(z)_y / ∂h = W_y − Σ_v p_v W_v: the forward keeps that sum (one [positions, hidden] tensor), so the
    backward pass is an elementwise product instead of two more [positions, vocab] matmuls (recompute and gradient)
    and no [positions, vocab] logits are kept. The entropy carries no gradient, as in ART."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk_fn):
        with torch.no_grad():
            chosen, entropy, expected = chunk_fn(weight, bias, hidden, targets)
        ctx.save_for_backward(weight, targets, expected)
        ctx.hidden_dtype = hidden.dtype
        ctx.mark_non_differentiable(entropy)
        return chosen, entropy

    @staticmethod
    def backward(ctx, grad_chosen, grad_entropy):
        weight, targets, expected = ctx.saved_tensors
        grad = grad_chosen.unsqueeze(-1) * (weight.index_select(0, targets).float() - expected.float())
        return grad.to(ctx.hidden_dtype), None, None, None, None


def _compiled(fn):
    """`fn` compiled: the lm_head's bf16 logits are read once into fused fp32 reductions instead of being written out as
    fp32 and read again by each of the log-softmax, gather and entropy passes. Falls back to eager when compiling fails
    (only compile errors are caught: checkpointing stops its recompute by raising)."""
    from torch._dynamo.exc import TorchDynamoException

    state = {"fn": torch.compile(fn, dynamic=True)}

    def run(*args):
        try:
            return state["fn"](*args)
        except TorchDynamoException as error:
            if state["fn"] is fn:
                raise
            print(f"trainyard_trainer: compiled log-probabilities unavailable ({type(error).__name__}); running eager", file=sys.stderr)
            state["fn"] = fn
            return fn(*args)

    return run


def _chunk_functions(compiled: bool) -> tuple[Any, Any]:
    if not compiled:
        return _chunk_logprobs, _chunk_logprobs_and_expected
    return _compiled(_chunk_logprobs), _compiled(_chunk_logprobs_and_expected)


def _graph_forward(model: Any, ids: torch.Tensor, lengths: list[int], device: torch.device) -> tuple[torch.Tensor, list[int], int | None, Any]:
    """How a forward runs with layers replayed as CUDA graphs (`--compile graphs`): (token ids, sequence lengths, varlen
    maximum, a context for the layers).

    The layers are compiled and their graphs recorded per distinct shape: the row's length and, for packed rows, the
    number of sequence boundaries. So the row is padded up to a multiple of the length bucket: a single sequence grows
    at its end (causal attention: no real position sees the padding); packed sequences get a padding sequence of their
    own, then empty sequences up to a power-of-two count, and varlen attention is told the padded length as the longest
    (any upper bound is correct). The caller keeps only the real positions.

    The LoRA weights' gradients get buffers of their own first: a weight without one would take its first backward's
    output as its gradient, memory of the graphs' pool that the next forward reuses while the next pack or step still
    accumulates into it.

    A forward without gradient or with gradient checkpointing runs its layers eagerly instead: a forward with no
    backward pending ends the graphs' generation at every layer (each layer's output would be overwritten by the next
    layer), and a checkpoint's recompute inside the backward pass is not something the graphs are recorded for."""
    if not torch.is_grad_enabled() or model.trainyard_checkpointing:
        return ids, lengths, None, _eager(model)
    for p in model.trainyard_graph_params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    bucket = model.trainyard_length_bucket
    total = ids.shape[1]
    padded = -(-total // bucket) * bucket
    if padded > total:
        ids = torch.cat([ids, ids.new_zeros((1, padded - total))], dim=1)
    if len(lengths) == 1:
        lengths, longest = [padded], None
    else:
        lengths = [*lengths, padded - total]
        lengths += [0] * ((1 << (len(lengths) - 1).bit_length()) - len(lengths))
        longest = padded
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()  # a new forward: the graphs' outputs of the last one are consumed
    return ids, lengths, longest, contextlib.nullcontext()


@contextlib.contextmanager
def _eager(model: Any):
    """The compiled layers run eagerly for the duration of the block (and stay eager if they were given up meanwhile)."""
    layers = model.trainyard_compiled_layers
    compiled = [layer._compiled_call_impl for layer in layers]
    for layer in layers:
        layer._compiled_call_impl = None
    try:
        yield
    finally:
        if model.trainyard_compiled_layers is layers:
            for layer, impl in zip(layers, compiled):
                layer._compiled_call_impl = impl


def packed_logprobs(model: Any, sequences: list[list[int]], device: torch.device, chunk_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """One forward over `sequences` packed into a row: log p(token t | earlier tokens of its sequence) for t = 1..n-1 of
    each sequence, and the full-vocabulary entropy at those positions, concatenated in order ([Σ (n_i - 1)]), with the
    per-sequence counts (n_i - 1).

    The lm_head and the log-softmax (fp32) run over chunks of `chunk_size` positions, so a long row never holds
    T x vocab logits: with gradient, each chunk keeps only what its backward pass needs (`_HeadLogprobs`), or, with
    `fused_logprobs` off or a trainable lm_head, recomputes its logits in the backward pass."""
    lengths = [len(s) for s in sequences]
    ids = as_tensor([[t for s in sequences for t in s]], torch.long, device)
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = causal_lm.get_output_embeddings()
    plain, with_expected = getattr(model, "trainyard_chunk_functions", (_chunk_logprobs, _chunk_logprobs_and_expected))
    weight, bias = head.weight, getattr(head, "bias", None)
    fused = getattr(model, "trainyard_fused_logprobs", True) and not weight.requires_grad and (bias is None or not bias.requires_grad)
    from torch._dynamo.exc import TorchDynamoException

    if torch.is_grad_enabled():
        _checkpoint_if_needed(model, ids.shape[1])
    forward_ids, forward_lengths, longest, layers = ids, lengths, None, contextlib.nullcontext()
    if getattr(model, "trainyard_length_bucket", None):
        forward_ids, forward_lengths, longest, layers = _graph_forward(model, ids, lengths, device)
    with _autocast(model, device), layers:
        try:
            hidden = hidden_states(model, forward_ids, forward_lengths, longest)[0, : ids.shape[1] - 1]
        except TorchDynamoException as error:
            if not getattr(model, "trainyard_compiled_layers", None):
                raise
            _uncompile_layers(model, error)
            hidden = hidden_states(model, forward_ids, forward_lengths, longest)[0, : ids.shape[1] - 1]
        targets = ids[0, 1:]
        logprobs, entropies = [], []
        for start in range(0, hidden.shape[0], chunk_size):
            h, t = hidden[start : start + chunk_size], targets[start : start + chunk_size]
            if not (torch.is_grad_enabled() and hidden.requires_grad):
                lp, ent = plain(weight, bias, h, t)
            elif fused:
                lp, ent = _HeadLogprobs.apply(h, weight, bias, t, with_expected)
            else:
                lp, ent = checkpoint(plain, weight, bias, h, t, use_reentrant=False)
            logprobs.append(lp)
            entropies.append(ent)
    if not logprobs:  # a single one-token sequence: nothing is predicted
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, empty, [0]
    logprobs, entropies = torch.cat(logprobs), torch.cat(entropies)
    if len(lengths) > 1:
        # Position t predicts token t+1; the last position of each sequence would predict the next sequence's first token.
        keep, offset = [], 0
        for n in lengths:
            keep.extend(range(offset, offset + n - 1))
            offset += n
        index = as_tensor(keep, torch.long, device)
        logprobs, entropies = logprobs.index_select(0, index), entropies.index_select(0, index)
    return logprobs, entropies, [n - 1 for n in lengths]


def token_logprobs(model: Any, token_ids: list[int], device: torch.device, chunk_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token t | tokens < t) for t = 1..S-1 of one sequence, and the entropy at each of those positions."""
    logprobs, entropies, _ = packed_logprobs(model, [token_ids], device, chunk_size)
    return logprobs, entropies


class CheckpointWriteError(RuntimeError):
    """A checkpoint that could not be written (a full disk, say): exit 1, retried, on this machine or another."""


def save_adapter(model: Any, output_dir: str, base_model: str, optimizer_state: dict[str, Any] | None) -> None:
    """A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) that peft and vLLM load, and the
    optimizer state for the next step next to it; all of them or none (`_write_checkpoint`)."""
    model.peft_config["default"].base_model_name_or_path = base_model

    def write(staging: str) -> None:
        model.save_pretrained(staging, safe_serialization=True)
        if optimizer_state is not None:
            torch.save(optimizer_state, os.path.join(staging, OPTIMIZER_FILE))

    _write_checkpoint(output_dir, write)


def copy_checkpoint(source: str, output_dir: str) -> None:
    """Carry a checkpoint forward unchanged (a step with nothing to train), optimizer state included; all of its files
    or none (`_write_checkpoint`)."""

    def write(staging: str) -> None:
        for name in (*ADAPTER_FILES, OPTIMIZER_FILE):
            path = os.path.join(source, name)
            if os.path.exists(path):
                shutil.copy2(path, os.path.join(staging, name))

    _write_checkpoint(output_dir, write)


def _write_checkpoint(output_dir: str, write: Callable[[str], None]) -> None:
    """Runs `write` into a staging directory inside `output_dir` and moves what it wrote into place only once all of it
    is written, so a failed write (a full disk) never leaves half a checkpoint behind: torch.save on a full disk
    leaves a truncated optimizer.pt beside a complete-looking adapter. The worker, the server and vLLM read the
    checkpoint's files by name in `output_dir` and never look into the staging directory (a dot directory, removed
    either way); being in `output_dir`, it is on the same filesystem, so each move is a rename. A failure names the
    directory and the space left there, which torch's own message (`unexpected pos 57536 vs 57428`) does not."""
    from safetensors import SafetensorError

    staging, moved = None, []
    try:
        os.makedirs(output_dir, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".partial-", dir=output_dir)
        write(staging)
        for name in sorted(os.listdir(staging)):
            os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
            moved.append(name)
        os.rmdir(staging)
    except (OSError, RuntimeError, SafetensorError) as error:
        try:  # measured before the partial files go: the space there was when the write failed
            free = shutil.disk_usage(output_dir).free
            space = f"{free} bytes ({free / 2**20:.1f} MiB) free there"
        except OSError:
            space = "its free space unknown"
        for name in moved:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(output_dir, name))
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        raise CheckpointWriteError(f"cannot write the checkpoint into {output_dir} ({space}): {reason}") from error


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
