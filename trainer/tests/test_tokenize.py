"""Tokenization with a tiny tokenizer and chat template: only sampled tokens are trainable."""
import copy
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


def default_system_prompt_tokenizer(tokenizer):
    """The tiny tokenizer with the opening of Qwen2.5's chat template: a default system prompt when the conversation
    does not start with a system message."""
    from tiny import CHAT_TEMPLATE

    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = ("{%- if messages[0].role != 'system' %}<|im_start|>system\nanswer please<|im_end|>\n{% endif %}" + CHAT_TEMPLATE)
    return qwen


@pytest.mark.parametrize("template", ["tiny", "default system prompt"])
def test_sft_trains_an_assistant_turn_that_opens_the_conversation_like_any_other(tokenizer, template):
    if template == "default system prompt":
        tokenizer = default_system_prompt_tokenizer(tokenizer)
    row = {"messages": [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]}
    seq = sft_sequence(tokenizer, row, "all")
    assert seq.token_ids == ids(tokenizer, tokenizer.apply_chat_template(row["messages"], tokenize=False))
    trained = [tokenizer.convert_ids_to_tokens(t) for t, m in zip(seq.token_ids, seq.mask) if m]
    assert trained == ["hello", "<|im_end|>", "yes", "<|im_end|>"]
    assert tokenizer.convert_ids_to_tokens(seq.token_ids[seq.mask.index(1) - 2 : seq.mask.index(1)]) == ["<|im_start|>", "assistant"]


def test_an_opening_assistant_turn_whose_header_depends_on_its_content_is_refused_naming_the_row(tokenizer):
    odd = copy.deepcopy(tokenizer)
    odd.chat_template = "{%- for m in messages %}<|im_start|>{{ m.content|length }} {{ m.content }}<|im_end|>\n{% endfor %}"
    row = {"messages": [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}]}
    with pytest.raises(InputError, match=r"^inputs line 4: the chat template renders the assistant turn that opens the conversation in a way"):
        sft_sequence(odd, row, "all", where="inputs line 4")


def qwen3_tokenizer():
    """Word-level tokens with <think> and </think> as special tokens, and the assistant branch of Qwen3's chat template
    (its reasoning handling kept; spaces separate the words): the last assistant turn after the last user message is
    rendered behind an empty think block."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    vocab = {t: i for i, t in enumerate(specials + ["user", "assistant", "hi", "hello", "hmm", "greeting", "\n", "\n\n"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="removed")
    tok.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>")
    tokenizer.chat_template = (
        "{%- set ns = namespace(last_query_index=messages|length - 1) %}"
        "{%- for m in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
        "{%- if m.role == 'user' and ns.last_query_index == messages|length - 1 %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
        "{%- for message in messages %}"
        "{%- if message.role == 'user' %}{{- '<|im_start|> user \n ' + message.content + ' <|im_end|> \n ' }}"
        "{%- elif message.role == 'assistant' %}{%- set content = message.content %}{%- set reasoning_content = '' %}"
        "{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0].split('<think>')[-1] %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
        "{%- if loop.index0 > ns.last_query_index %}{%- if loop.last or reasoning_content %}"
        "{{- '<|im_start|> assistant \n <think> \n\n ' + reasoning_content + ' </think> \n\n ' + content }}"
        "{%- else %}{{- '<|im_start|> assistant \n ' + content }}{%- endif %}"
        "{%- else %}{{- '<|im_start|> assistant \n ' + content }}{%- endif %}"
        "{{- ' <|im_end|> \n ' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|> assistant \n ' }}{%- endif %}")
    return tokenizer


def test_sampled_tokens_opening_a_think_block_replace_the_empty_one_of_a_qwen3_template_as_in_art():
    tokenizer = qwen3_tokenizer()
    user = {"role": "user", "content": "hi"}
    prompt = ["<|im_start|>", "user", "\n", "hi", "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"]
    empty_block = ["<think>", "\n\n", "</think>", "\n\n"]

    def choice(tokens):
        return {"message": {"role": "assistant", "content": "hello"},
                "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -0.5} for i in tokenizer.convert_tokens_to_ids(tokens)]}}

    def tokens(seq):
        return tokenizer.convert_ids_to_tokens(seq.token_ids)

    # What ART 0.5.17 trains on for this history (its tokenize_trajectory run on the same tokenizer): the prompt vLLM
    # sampled from, without the template's empty block, then the sampled tokens.
    sampled = ["<think>", "\n", "hmm", "greeting", "\n", "</think>", "\n\n", "hello", "<|im_end|>"]
    [seq] = tokenize_history(tokenizer, [user, choice(sampled)], None)
    assert tokens(seq) == prompt + sampled
    assert seq.mask == [0] * len(prompt) + [1] * len(sampled)
    assert seq.logprobs[len(prompt):] == [-0.5] * len(sampled)
    # Sampled tokens without a think block keep the template's.
    [seq] = tokenize_history(tokenizer, [user, choice(["hello", "<|im_end|>"])], None)
    assert tokens(seq) == prompt + empty_block + ["hello", "<|im_end|>"]
    # So does a plain assistant message trained without logprobs: ART applies the rule to sampled Choices only.
    plain = {"role": "assistant", "content": " ".join(sampled[:-1])}
    [seq] = tokenize_history(tokenizer, [user, plain], None, allow_training_without_logprobs=True)
    assert tokens(seq) == prompt + empty_block + sampled[:-1]


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"logprobs": {"content": [{"token": "token_id:999999", "logprob": -1.0}]}},
         r"messages_and_choices\[1\]: logprobs.content\[0\].token holds token id 999999, outside the model's vocabulary \[0, 32\)"),
        ({"logprobs": {"content": [{"token": "token_id:-3", "logprob": -1.0}]}}, r"logprobs.content\[0\].token holds token id -3"),
        ({"token_ids": [40]}, r"messages_and_choices\[1\]: token_ids holds token id 40, outside the model's vocabulary \[0, 32\)"),
        ({"prompt_token_ids": [2, 5, 32], "token_ids": [16]}, r"choice 0: prompt_token_ids holds token id 32"),
        ({"prompt_token_ids": [True, 5], "token_ids": [16]}, r"choice 0: prompt_token_ids must be a list of integers"),
    ],
)
def test_token_ids_outside_the_models_vocabulary_are_refused_naming_the_field_and_the_id(tokenizer, choice, message):
    items = [{"role": "user", "content": "hi"}, {**token_choice(tokenizer, ["hello"]), **choice}]
    with pytest.raises(InputError, match=message):
        tokenize_history(tokenizer, items, None, vocab_size=len(tokenizer))


def test_the_vocabulary_is_the_models_embedding_not_the_tokenizer(tokenizer):
    # An embedding with more rows than the tokenizer has tokens (padded, as Qwen's are): ids up to it are the model's.
    choice = {**token_choice(tokenizer, ["hello"]), "token_ids": [40]}
    [seq] = tokenize_history(tokenizer, [{"role": "user", "content": "hi"}, choice], None, vocab_size=64)
    assert seq.token_ids[-1] == 40


@pytest.mark.parametrize("calls", ["lookup", 5, ["lookup"], [["lookup", "{}"]], [{"function": "lookup"}]])
def test_malformed_tool_calls_are_refused_naming_the_message(tokenizer, calls):
    user, earlier = {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "tool_calls": calls}
    with pytest.raises(InputError, match=r"^history.messages_and_choices\[1\]: tool_calls must be a list of tool call objects"):
        tokenize_history(tokenizer, [user, earlier, user, token_choice(tokenizer, ["hello"])], None)
    sampled = {**token_choice(tokenizer, ["ok"]), "logprobs": None}
    sampled["message"]["tool_calls"] = calls  # an earlier Choice, context only
    with pytest.raises(InputError, match=r"^history.messages_and_choices\[1\].message: tool_calls must be a list of tool call objects"):
        tokenize_history(tokenizer, [user, sampled, user, token_choice(tokenizer, ["hello"])], None)
    with pytest.raises(InputError, match=r"^row.messages\[1\]: tool_calls must be a list of tool call objects"):
        sft_sequence(tokenizer, {"messages": [user, earlier]}, "all")


def test_a_choice_whose_message_is_not_an_object_is_refused(tokenizer):
    with pytest.raises(InputError, match=r"^history.messages_and_choices\[1\].message must be an object"):
        tokenize_history(tokenizer, [{"role": "user", "content": "hi"}, {"message": "hello"}, token_choice(tokenizer, ["yes"])], None)


def test_lone_surrogates_in_message_content_are_refused(tokenizer):
    bad = {"role": "user", "content": "hi \ud800"}
    with pytest.raises(InputError, match=r"^history: the text holds a lone surrogate '\\ud800'"):
        tokenize_history(tokenizer, [bad, token_choice(tokenizer, ["hello"])], None)
    with pytest.raises(InputError, match=r"^history.messages_and_choices\[1\]: the text holds a lone surrogate"):
        tokenize_history(tokenizer, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello \udfff"}], None,
                         allow_training_without_logprobs=True)
    with pytest.raises(InputError, match=r"^row: the text holds a lone surrogate"):
        sft_sequence(tokenizer, {"messages": [bad, {"role": "assistant", "content": "hello"}]}, "all")
