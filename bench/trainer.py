"""Trainer benchmark: trained tokens per second of one RL step through trainyard_trainer, against a plain
forward + backward + AdamW step of the same LoRA model on the same sequences (the baseline), in the same run.

    npm run bench:trainer                                   # CPU, tiny random Llama, variable lengths: packed vs unpacked
    trainer/.venv/bin/python bench/trainer.py --shape qwen2.5-0.5b --device cuda --batch fixed --seq-len 4096
                                                            # GPU: a Qwen2.5-0.5B-shaped model, random bf16 weights

The RL step runs once per variant (`--variants`, `name=trainer flags` separated by `;`; default: packed and
unpacked), each printed with its ratio to the baseline and to the first variant. `--batch variable` gives every group
a shared prompt of 32-128 tokens and completions so that sequences are 64-1,024 tokens long (`--seq-len` is then the
longest); `--batch fixed` makes every sequence `--seq-len` tokens, a quarter of them prompt. `--row-length` sets ART's
packed_sequence_length (tokens per row, one optimizer step each).

Prints one JSON line per measurement. On CUDA it adds the peak GPU memory allocated and model FLOPs utilisation:
6 · N · tokens/s over the GPU's peak dense bf16 FLOP/s (--peak-tflops, default 989 for an H100 SXM), N = the base
model's parameters excluding embeddings. Model weights are random (built from a config), so nothing is downloaded.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import random
import sys
import tempfile
import time

import torch

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab
    "tiny": (256, 512, 4, 4, 2, 1024),
    # Qwen2.5-0.5B's 24 layers and LoRA modules at tiny widths: on a CPU its step is bound by the work per operation
    # (Python, dispatch), not by FLOPs, as 0.5B's step is bound by the host's launches on a GPU.
    "narrow-24": (64, 128, 24, 2, 1, 1024),
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2, 151936),
    "llama3.1-8b": (4096, 14336, 32, 32, 8, 128256),
}
CPU_SHAPES = ("tiny", "narrow-24")  # built in fp32 on the CPU; the others are the GPU shapes


def build(directory: str, shape: str) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    hidden, inter, layers, heads, kv, vocab = SHAPES[shape]
    marker = os.path.join(directory, f"built-{shape}")
    words = {f"w{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w1").save_pretrained(directory)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, max_position_embeddings=32768, tie_word_embeddings=False)
    with torch.device("meta"):
        meta = LlamaForCausalLM(config)
    n = sum(p.numel() for name, p in meta.named_parameters() if "embed_tokens" not in name and "lm_head" not in name)
    if os.path.exists(marker):
        return n
    # The GPU shapes are built in bf16, the dtype the trainer loads them in on CUDA (half the bytes to make, write and
    # read), on the GPU when there is one: drawing 8B random weights on a CPU takes minutes.
    gpu_shape = shape not in CPU_SHAPES
    dtype = torch.bfloat16 if gpu_shape else torch.float32
    device = "cuda" if gpu_shape and torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.save_pretrained(directory, safe_serialization=True)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    open(marker, "w").close()
    return n


def groups(vocab: int, num_groups: int, group_size: int, seq_len: int, variable: bool) -> list[dict]:
    rng = random.Random(0)
    out = []
    for _ in range(num_groups):
        prompt_len = rng.randrange(32, 129) if variable else seq_len // 4
        prompt = [rng.randrange(2, vocab) for _ in range(prompt_len)]
        trajectories = []
        for t in range(group_size):
            completion_len = rng.randrange(max(64 - prompt_len, 1), seq_len - prompt_len + 1) if variable else seq_len - prompt_len
            ids = [rng.randrange(2, vocab) for _ in range(completion_len)]
            choice = {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": ""}, "prompt_token_ids": prompt, "token_ids": ids,
                      "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -rng.random() * 8} for i in ids]}}
            trajectories.append({"messages_and_choices": [{"role": "user", "content": "x"}, choice], "reward": float(t % 2)})
        out.append({"trajectories": trajectories})
    return out


def rl_step(directory: str, data: list[dict], device: str, work: str, flags: list[str], row_length: int | None = None) -> dict:
    from trainyard_trainer.main import main

    inputs = os.path.join(work, "inputs.jsonl")
    with open(inputs, "w") as f:
        f.writelines(json.dumps(g) + "\n" for g in data)
    out_dir = os.path.join(work, "m", "step-1")
    os.makedirs(out_dir, exist_ok=True)
    spec = {"spec_version": 1, "job": {"id": "bench", "kind": "rl", "attempt": 1}, "model": {"id": "m", "base_model": directory},
            "base_checkpoint": None, "base_checkpoint_uri": None, "target_step": 1,
            "config": {"experimental_config": {"learning_rate": 1e-5, **({"packed_sequence_length": row_length} if row_length else {})}},
            "inputs_path": inputs, "num_inputs": len(data), "output_dir": out_dir}
    with open(os.path.join(work, "spec.json"), "w") as f:
        json.dump(spec, f)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["--device", device, *flags, os.path.join(work, "spec.json")])
    if code != 0:
        raise SystemExit(f"trainer exited {code}")
    steps = [json.loads(line)["data"] for line in buffer.getvalue().splitlines() if '"gradient_step"' in line]
    tokens = sum(s["num_tokens"] for s in steps)
    seconds = sum(s["num_tokens"] / s["tokens_per_second"] for s in steps)
    return {"tokens": tokens, "seconds": seconds, "gradient_steps": len(steps), "step_tokens_per_second": [round(s["tokens_per_second"]) for s in steps]}


def baseline(directory: str, data: list[dict], device: str) -> dict:
    """The same LoRA model as peft builds it (fp32 LoRA compute), eager and without gradient checkpointing: a plain HF
    forward (full logits) + cross-entropy + backward + AdamW step per sequence."""
    from trainyard_trainer.model import Options, load_model, pick_device, trainable_parameters

    dev = pick_device(device)
    model = load_model(directory, None, Options(device=device, lora_dtype="fp32", compile_logprobs=False, compile_layers=False, gradient_checkpointing=False), dev)
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    sequences = [t["messages_and_choices"][1]["prompt_token_ids"] + t["messages_and_choices"][1]["token_ids"] for g in data for t in g["trajectories"]]
    if dev.type == "cuda":  # a first sequence outside the clock: CUDA context, cuBLAS handles, allocator
        x = torch.tensor([sequences[0][:256]], device=dev)
        model(input_ids=x, labels=x).loss.backward()
        optimizer.zero_grad()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    for ids in sequences:
        x = torch.tensor([ids], device=dev)
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.1)
        optimizer.step()
        optimizer.zero_grad()
    sync()
    return {"tokens": sum(map(len, sequences)), "seconds": time.perf_counter() - started}


KERNEL_KINDS = (("attention", ("flash", "fmha", "attn", "cudnn")), ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "wgmma")),
                ("compiled (triton)", ("triton",)))


def profile(directory: str, data: list[dict], device: str, work: str, flags: list[str], top: int, row_length: int | None) -> dict:
    """One more RL step of a variant under torch.profiler: the GPU's kernel time against the step's wall time (how busy
    the host keeps the GPU) and where the kernel time goes. Copies and fills (loading the model) are left out."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run = rl_step(directory, data, device, work, flags, row_length)
    totals: dict[str, float] = {}
    for event in prof.events():
        # "#" marks a range annotated on the GPU's timeline (Optimizer.step#AdamW.step), which spans kernels counted already.
        if event.device_type == DeviceType.CUDA and "#" not in event.name and not any(word in event.name.lower() for word in ("memcpy", "memset")):
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time / 1e6
    busy = sum(totals.values())
    kinds = {kind: 0.0 for kind, _ in KERNEL_KINDS} | {"other": 0.0}
    for name, seconds in totals.items():
        kind = next((k for k, words in KERNEL_KINDS if any(w in name.lower() for w in words)), "other")
        kinds[kind] += seconds
    return {"step_seconds_profiled": round(run["seconds"], 4), "kernel_seconds": round(busy, 4),
            "kernel_share_of_step": round(busy / run["seconds"], 3) if run["seconds"] else None,
            "by_kind": {k: round(v / busy, 3) for k, v in kinds.items()} if busy else {},
            "top_kernels": [[name[:90], round(sec / busy, 3)] for name, sec in sorted(totals.items(), key=lambda item: -item[1])[:top]]}


def gpu_figures(run: dict, n: int, peak_tflops: float) -> dict:
    """A CUDA measure's model FLOPs utilisation (6 · N · tokens/s over the peak) and peak GPU memory."""
    return {"mfu": round(6 * n * run["tokens"] / run["seconds"] / (peak_tflops * 1e12), 4), "peak_memory_gib": round(run["peak_gib"], 2)}


def parse_variants(text: str) -> list[tuple[str, list[str]]]:
    variants = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, flags = item.partition("=")
        variants.append((name.strip(), flags.split()))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", choices=("variable", "fixed"), default="variable")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (fixed) or the longest (variable)")
    parser.add_argument("--row-length", type=int, help="ART's packed_sequence_length: tokens per row, one optimizer step each (default: the longest sequence rounded up to 2,048)")
    parser.add_argument("--variants", default="packed=--packing on;unpacked=--packing off", help="name=trainer flags, separated by ;")
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain forward + backward + AdamW baseline")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measure; the fastest is reported (the first pays for warm-up and compiling)")
    parser.add_argument("--model-dir", help="build the random model here, or reuse it when already built")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak (H100 SXM 989, H200 989)")
    parser.add_argument("--profile", action="store_true", help="CUDA: profile one more step of the first variant (kernel time and where it goes)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    with tempfile.TemporaryDirectory() as work:
        directory = args.model_dir or os.path.join(work, "model")
        n = build(directory, args.shape)
        data = groups(SHAPES[args.shape][5], args.groups, args.group_size, args.seq_len, args.batch == "variable")
        measures = [(name, lambda flags=flags: rl_step(directory, data, args.device, work, flags, args.row_length)) for name, flags in parse_variants(args.variants)]
        if not args.no_baseline:
            measures.append(("baseline_forward_backward", lambda: baseline(directory, data, args.device)))
        runs = {}
        for name, measure in measures:
            if cuda:
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                tries = [measure() for _ in range(max(args.repeat, 1))]
            except (RuntimeError, SystemExit) as error:  # a variant that fails on this machine is reported, the others still run
                print(json.dumps({"bench": "trainer", "failed": name, "error": f"{type(error).__name__}: {error}"[:400]}), flush=True)
                continue
            runs[name] = dict(min(tries, key=lambda r: r["seconds"]), first_seconds=tries[0]["seconds"])
            if cuda:
                runs[name]["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            # As each measure ends, so that a run cut short still reports what it measured.
            done = {"bench": "trainer", "done": name, "tokens_per_second": round(runs[name]["tokens"] / runs[name]["seconds"], 1),
                    "first_run_tokens_per_second": round(runs[name]["tokens"] / runs[name]["first_seconds"], 1)}
            if cuda:
                done |= gpu_figures(runs[name], n, args.peak_tflops)
            # Each gradient step's speed in the run reported: a step that compiles or records CUDA graphs stands out.
            print(json.dumps(done | {"step_tokens_per_second": runs[name].get("step_tokens_per_second")}), file=sys.stderr, flush=True)
        if cuda and args.profile:
            name, flags = parse_variants(args.variants)[0]
            try:
                print(json.dumps({"bench": "trainer", "profile": name, "shape": args.shape, **profile(directory, data, args.device, work, flags, 15, args.row_length)}), flush=True)
            except (RuntimeError, SystemExit) as error:
                print(json.dumps({"bench": "trainer", "failed": f"profile {name}", "error": f"{type(error).__name__}: {error}"[:400]}), flush=True)
    first = next(iter(runs.values()))
    base = runs.get("baseline_forward_backward")
    for name, run in runs.items():
        tps = run["tokens"] / run["seconds"]
        line = {"bench": "trainer", "measure": name, "shape": args.shape, "device": args.device, "batch": args.batch, "params_non_embedding": n,
                "seq_len": args.seq_len, "sequences": args.groups * args.group_size, "tokens": run["tokens"], "tokens_per_second": round(tps, 1),
                "ratio_to_first": round(tps / (first["tokens"] / first["seconds"]), 3)}
        if base is not None:
            line["ratio_to_baseline"] = round(tps / (base["tokens"] / base["seconds"]), 3)
        if args.repeat > 1:
            line["first_run_tokens_per_second"] = round(run["tokens"] / run["first_seconds"], 1)  # with warm-up and compiling
        if "gradient_steps" in run:
            line["gradient_steps"] = run["gradient_steps"]
        if cuda:
            line |= gpu_figures(run, n, args.peak_tflops)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
