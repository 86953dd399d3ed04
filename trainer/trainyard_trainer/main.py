"""The trainer command of trainyard-worker: `python -m trainyard_trainer [options] SPEC_PATH` (docs/trainer.md).

Exit codes: 0 with a checkpoint line; 3 when retrying cannot help (a bad config key, unusable inputs, an unknown
spec_version, training that diverges), the reason printed last on stderr; 4 when this machine cannot run the trainer
(a requested device it lacks: the job is not at fault), the reason printed last on stderr; 2 for a refused option; 1
for anything else (the job is retried)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any

PERMANENT_FAILURE = 3
# The machine, not the job, is at fault (a requested device it lacks): another machine can run the job, so it must not
# be failed for good as with 3, which on a broken GPU box would empty the whole queue into FAILED within seconds.
UNFIT_MACHINE = 4


def _at_least(text: str, minimum: int, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return int(text)


def _positive(text: str) -> int:
    return _at_least(text, 1, "a positive number of tokens")


def _non_negative(text: str) -> int:
    return _at_least(text, 0, "a non-negative number of tokens")


def _positive_integer(text: str) -> int:
    return _at_least(text, 1, "a positive integer")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainyard_trainer", description=__doc__)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu or cuda")
    # Options that hold for every job the worker runs: a 0 here would make each job "complete" untrained (alpha 0 scales
    # the LoRA to nothing, a maximum length of 0 drops every sequence), so they are refused by name instead.
    parser.add_argument("--lora-rank", type=_positive_integer, default=8)
    parser.add_argument("--lora-alpha", type=_positive_integer, default=16)
    parser.add_argument("--gradient-checkpointing", choices=("auto", "on", "off"), default="auto", help="auto: with CUDA, on for a forward whose activations would not fit in memory")
    parser.add_argument("--max-seq-length", type=_positive, default=32768, help="the model's maximum sequence length (ART's default 32768)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the shuffles of the packing plan")
    parser.add_argument("--packing", choices=("on", "off"), default="on", help="several sequences per forward pass (off: one sequence per forward)")
    parser.add_argument("--pack-length", type=_non_negative, default=0, help="tokens per packed forward (default or 0: the RL row length; SFT: the longest sequence rounded up to 2048)")
    parser.add_argument("--lora-dtype", choices=("auto", "bf16", "fp32"), default="auto", help="compute dtype of the LoRA matmuls (fp32 weights either way); auto: bf16 on CUDA")
    parser.add_argument("--compile", choices=("auto", "off", "logprobs", "layers", "graphs"), default="auto",
                        help="torch.compile the lm_head log-softmax chunks (logprobs), and each decoder layer too (layers), replayed as CUDA graphs (graphs, "
                             "experimental); auto: layers with CUDA in a resident process, else off")
    parser.add_argument("--length-bucket", type=_positive, default=256, help="with --compile graphs: a forward is padded up to a multiple of this many tokens (one graph per bucket)")
    parser.add_argument("--adamw", choices=("fused", "default"), default="fused", help="fused: torch's fused AdamW kernel (CUDA, CPU); default: torch's default implementation")
    parser.add_argument("--logprobs", choices=("fused", "recompute"), default="fused",
                        help="gradient of the log-probabilities through the lm_head: fused (kept from the forward pass) or recompute (each chunk's logits again in the backward pass)")
    parser.add_argument("--attention", choices=("sdpa", "varlen"), default="sdpa",
                        help="on CUDA, how a row of one sequence attends: varlen flash attention, or sdpa (cuDNN's kernel first); packed rows always use varlen")
    parser.add_argument("--resident", choices=("auto", "off"), default="auto",
                        help="auto: serve job after job in this process when trainyard-worker offers it; off: one job per process")
    parser.add_argument("spec", nargs="?", default=os.environ.get("TRAINYARD_JOB_SPEC"), help="the job spec (default: $TRAINYARD_JOB_SPEC)")
    return parser.parse_args(argv)


class Permanent(Exception):
    pass


def _read_jsonl(path: str) -> list[Any]:
    rows = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise Permanent(f"inputs line {n} is not UTF-8: {error}") from error
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise Permanent(f"inputs line {n} is not JSON: {error}") from error
    return rows


def _base_adapter(spec: dict[str, Any]) -> str | None:
    from .model import check_adapter, local_path

    uri = spec.get("base_checkpoint_uri")
    if not uri:
        return None
    path = local_path(uri)
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise Permanent(f"base_checkpoint_uri {uri!r} is not an adapter directory this machine can read")
    check_adapter(path, f"base_checkpoint_uri {uri!r}")
    return path


def run(args: argparse.Namespace, spec_path: str | None, resident: Any = None) -> None:
    """One job. `resident`: the ResidentSource of a long-lived process, else everything is loaded for this job."""
    from . import distributed, events, rl, sft
    from .config import ConfigError
    from .model import Options, pick_device

    if not spec_path:
        raise Permanent("no job spec: pass its path or set TRAINYARD_JOB_SPEC")
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("spec_version") != 1:
        raise Permanent(f"spec_version {spec.get('spec_version')!r} is not supported (this trainer reads 1)")
    kind = (spec.get("job") or {}).get("kind")
    # Compiling costs about a minute on a GPU (measured on an H200 for 0.5B and 1.5B shapes) and then runs a step 2.5-3
    # times faster: `auto` compiles only in a resident process, which pays it once for job after job.
    compiled = None if resident is not None else False
    options = Options(
        device=args.device, lora_rank=args.lora_rank, lora_alpha=args.lora_alpha,
        gradient_checkpointing={"auto": None, "on": True, "off": False}[args.gradient_checkpointing],
        max_seq_length=args.max_seq_length, seed=args.seed, packing=args.packing == "on", pack_length=args.pack_length or None,
        lora_dtype=args.lora_dtype, compile_logprobs={"auto": compiled, "off": False}.get(args.compile, True),
        compile_layers={"auto": compiled, "layers": True}.get(args.compile, False),
        fused_logprobs=args.logprobs == "fused", attention=args.attention, fused_adamw=args.adamw == "fused",
        cuda_graphs=args.compile == "graphs", length_bucket=args.length_bucket,
    )
    device = pick_device(options.device)  # UnfitMachine (exit 4) when this machine lacks it
    if options.device == "auto" and events.is_main_process():
        # A GPU box whose driver broke would otherwise train a large model on the CPU for hours without a word.
        print(f"trainyard_trainer: --device auto chose {device}" + ("" if device.type == "cuda" else " (CUDA is not available)"),
              file=sys.stderr, flush=True)
    try:
        distributed.init(device)
        base_adapter = _base_adapter(spec)
        inputs = _read_jsonl(spec["inputs_path"])
        if kind not in ("rl", "sft"):
            raise Permanent(f"job kind {kind!r} is not rl or sft")
        if resident is not None:
            resident.begin(spec["model"]["base_model"], device)
        events.started_info["device"] = device.type
        (rl if kind == "rl" else sft).run(spec, inputs, options, device, base_adapter, resident)
    except ConfigError as error:
        raise Permanent(str(error)) from error


def run_reporting_permanent(args: argparse.Namespace, spec_path: str | None, resident: Any = None) -> int:
    """0, or 3 or 4 with the reason printed last on stderr; any other exception propagates."""
    from . import events
    from .config import UnfitMachine

    events.timings.clear()
    try:
        with events.timed("job_seconds"):
            run(args, spec_path, resident)
    except Permanent as error:
        print(f"trainyard_trainer: {error}", file=sys.stderr, flush=True)
        return PERMANENT_FAILURE
    except UnfitMachine as error:
        print(f"trainyard_trainer: {error}", file=sys.stderr, flush=True)
        return UNFIT_MACHINE
    print(f"trainyard_trainer: timings {json.dumps(events.timings)}", file=sys.stderr, flush=True)
    return 0


def serve(args: argparse.Namespace) -> int:
    """Job after job in this process (resident.py). An unexpected error ends the process with 1 in the middle of its
    job, as a process per job would: the worker fails that job as retryable and starts a new process for the next. A
    machine that cannot run the trainer (4) cannot run the next job either: the process reports the job and ends with 4."""
    from . import resident

    source = resident.ResidentSource()
    spec_path = args.spec
    while spec_path is not None:
        code = run_reporting_permanent(args, spec_path, source)
        resident.job_end(spec_path, code, source.device)
        # Cleaning up after a failed job happens once it is reported, while the worker reports and claims.
        source.end(ok=code == 0)
        if code == UNFIT_MACHINE:
            return code
        spec_path = resident.next_job()
    return 0


def main(argv: list[str] | None = None) -> int:
    from . import resident

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        code = serve(args) if args.resident == "auto" and resident.offered() else run_reporting_permanent(args, args.spec)
    except Exception:
        # No process group is ended here: another rank may still be inside a collective, and ending it could hang.
        traceback.print_exc()
        return 1
    # Loaded only when a job got that far (a spec that fails early never imports torch).
    distributed = sys.modules.get(f"{__package__}.distributed")
    if distributed is not None:
        distributed.close()
    return code
