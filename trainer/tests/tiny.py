"""A tiny tokenizer (word level, ChatML-like template with tools) and a tiny random Llama, built in the test: no
downloads."""
from __future__ import annotations

import os

import torch

SPECIALS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
WORDS = [
    "system", "user", "assistant", "tool", "tools:", "call", "say", "one", "word", "please", "answer", "hi", "hello",
    "yes", "no", "maybe", "the", "weather", "is", "sunny", "get_weather", "lookup", "city", "paris", "result", "ok",
    "thanks", "bye",
]
# ChatML with tool definitions in a system turn and tool calls printed as "call NAME".
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\ntools: {% for t in tools %}{{ t.function.name }} {% endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %} call {{ c.function.name }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model_dir(path: str, seed: int = 0, hidden: int = 128) -> str:
    """Saves the tokenizer and a random LlamaForCausalLM (hidden 128, 2 layers; init 0.1 so that one token can reach
    probability > 0.9, see the reference §6.2) into `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1,
        tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def token_choice(tokenizer, words: list[str], logprobs: list[float] | None = None, **extra) -> dict:
    """An OpenAI Choice as vLLM returns it with --return-tokens-as-token-ids."""
    ids = tokenizer.convert_tokens_to_ids(words)
    content = [{"token": f"token_id:{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
               for i, lp in zip(ids, logprobs or [-1.0] * len(ids))]
    return {"finish_reason": "stop", "index": 0, "logprobs": {"content": content},
            "message": {"role": "assistant", "content": " ".join(words)}, **extra}
