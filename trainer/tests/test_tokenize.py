"""Tokenization with a tiny tokenizer and chat template: only sampled tokens are trainable."""
import math

import pytest

from tiny import token_choice
from trainyard_trainer.tokenize import InputError, sft_sequence, tokenize_history


def ids(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def test_only_the_sampled_tokens_are_trainable_with_their_logprobs(tokenizer):
    items = [{"role": "system", "content": "answer one word"}, {"role": "user", "content": "say one word"},
             token_choice(tokenizer, ["maybe", "<|im_end|>"], [-0.7, -0.1])]
    [seq] = tokenize_history(tokenizer, items, None)
    prompt = ids(tokenizer, "<|im_start|>system\nanswer one word<|im_end|>\n<|im_start|>user\nsay one word<|im_end|>\n<|im_start|>assistant\n")
    assert seq.token_ids == prompt + ids(tokenizer, "maybe <|im_end|>")
    assert seq.mask == [0] * len(prompt) + [1, 1]
    assert all(math.isnan(x) for x in seq.logprobs[: len(prompt)])
    assert seq.logprobs[len(prompt):] == [-0.7, -0.1]


def test_token_ids_are_taken_verbatim_from_token_id_strings_not_the_text(tokenizer):
    choice = token_choice(tokenizer, ["yes"], [-0.2])
    choice["message"]["content"] = "no"  # the text is not re-encoded
    [seq] = tokenize_history(tokenizer, [{"role": "user", "content": "hi"}, choice], None)
    assert seq.token_ids[-1] == tokenizer.convert_tokens_to_ids("yes")
    assert seq.mask[-1] == 1


def test_multi_turn_history_trains_each_sampled_turn_and_not_the_template_end_of_turn_twice(tokenizer):
    items = [{"role": "user", "content": "hi"}, token_choice(tokenizer, ["hello", "<|im_end|>"]),
             {"role": "user", "content": "say one word"}, token_choice(tokenizer, ["maybe", "<|im_end|>"]),
             {"role": "user", "content": "bye"}]  # after the last trainable turn: dropped
    [seq] = tokenize_history(tokenizer, items, None)
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello <|im_end|>\n<|im_start|>user\nsay one word<|im_end|>\n<|im_start|>assistant\nmaybe <|im_end|>"
    assert seq.token_ids == ids(tokenizer, text)
    trained = [tokenizer.convert_ids_to_tokens(t) for t, m in zip(seq.token_ids, seq.mask) if m]
    assert trained == ["hello", "<|im_end|>", "maybe", "<|im_end|>"]


def test_tool_call_history_trains_the_sampled_call_and_keeps_tools_and_results_as_context(tokenizer):
    tools = [{"name": "get_weather", "parameters": {"type": "object"}}]  # a bare function spec gets wrapped
    call = token_choice(tokenizer, ["call", "get_weather", "<|im_end|>"])
    call["message"]["tool_calls"] = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"paris\"}"}}]
    items = [{"role": "user", "content": "the weather"}, call, {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
             token_choice(tokenizer, ["sunny", "<|im_end|>"])]
    [seq] = tokenize_history(tokenizer, items, tools)
    text = ("<|im_start|>system\ntools: get_weather <|im_end|>\n<|im_start|>user\nthe weather<|im_end|>\n<|im_start|>assistant\n"
            "call get_weather <|im_end|>\n<|im_start|>tool\nsunny<|im_end|>\n<|im_start|>assistant\nsunny <|im_end|>")
    assert seq.token_ids == ids(tokenizer, text)
    trained = [tokenizer.convert_ids_to_tokens(t) for t, m in zip(seq.token_ids, seq.mask) if m]
    assert trained == ["call", "get_weather", "<|im_end|>", "sunny", "<|im_end|>"]


def test_plain_assistant_messages_are_context_unless_training_without_logprobs_is_allowed(tokenizer):
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert tokenize_history(tokenizer, items, None) == []
    [seq] = tokenize_history(tokenizer, items, None, allow_training_without_logprobs=True)
    assert [m for m in seq.mask if m] == [1]
    assert math.isnan(seq.logprobs[-1])


def test_exact_vllm_ids_are_used_verbatim_and_append_only_turns_collapse(tokenizer):
    a = {**token_choice(tokenizer, ["hello"], [-0.5]), "prompt_token_ids": [2, 5], "token_ids": [14]}
    b = {**token_choice(tokenizer, ["maybe"], [-0.25]), "prompt_token_ids": [2, 5, 14, 3, 2], "token_ids": [19]}
    c = {**token_choice(tokenizer, ["no"], [-0.125]), "prompt_token_ids": [2, 6], "token_ids": [18]}  # does not extend
    first, second = tokenize_history(tokenizer, [{"role": "user", "content": "x"}, a, {"role": "user", "content": "y"}, b, c], None)
    assert first.token_ids == [2, 5, 14, 3, 2, 19]
    assert first.mask == [0, 0, 1, 0, 0, 1]
    assert first.logprobs[2] == -0.5 and first.logprobs[5] == -0.25 and math.isnan(first.logprobs[3])
    assert second.token_ids == [2, 6, 18] and second.mask == [0, 0, 1]


def test_malformed_token_and_mismatched_logprobs_are_refused_by_name(tokenizer):
    bad = token_choice(tokenizer, ["yes"])
    bad["logprobs"]["content"][0]["token"] = "token_id:x"
    with pytest.raises(InputError, match=r"messages_and_choices\[1\]: malformed token 'token_id:x'"):
        tokenize_history(tokenizer, [{"role": "user", "content": "hi"}, bad], None)
    with pytest.raises(InputError, match=r"messages_and_choices\[0\] is neither a message nor a Choice"):
        tokenize_history(tokenizer, [42], None)


def test_sft_masks_only_assistant_turns_or_only_the_last(tokenizer):
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                        {"role": "user", "content": "say one word"}, {"role": "assistant", "content": "maybe"}]}
    seq = sft_sequence(tokenizer, row, "all")
    assert seq.token_ids == ids(tokenizer, tokenizer.apply_chat_template(row["messages"], tokenize=False))
    trained = [tokenizer.convert_ids_to_tokens(t) for t, m in zip(seq.token_ids, seq.mask) if m]
    assert trained == ["hello", "<|im_end|>", "maybe", "<|im_end|>"]
    last = sft_sequence(tokenizer, row, "last")
    assert [tokenizer.convert_ids_to_tokens(t) for t, m in zip(last.token_ids, last.mask) if m] == ["maybe", "<|im_end|>"]
    with pytest.raises(InputError, match="assistant_turns=last needs the last message to be an assistant message"):
        sft_sequence(tokenizer, {"messages": row["messages"][:3]}, "last")
