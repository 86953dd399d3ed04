"""Trajectories to token sequences (art-trainer.md §1.2), and SFT rows to token sequences (§3).

RL: exactly the tokens the policy sampled (the Choices) are trainable; everything else is context. When every
trainable Choice carries vLLM's `prompt_token_ids` and `token_ids`, those ids are used verbatim (prompt followed by
completion, append-only turns collapsing into one sequence). Otherwise the conversation is rendered through the
model's chat template with each trainable turn replaced by a placeholder, and each placeholder is replaced by the
turn's sampled token ids (`token_ids` on the Choice, else `token_id:N` in its logprobs, else the token strings looked
up in the vocabulary). Token ids given in the inputs must lie in [0, vocab_size) of the model's token embedding.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .config import ConfigError

NAN = float("nan")
_PLACEHOLDER = "\u2063TYSPLICE{}\u2063"
_PLACEHOLDER_RE = re.compile("\u2063TYSPLICE(\\d+)\u2063")


class InputError(ConfigError):
    """Inputs the trainer cannot use (exit 3: a retry will not help)."""


@dataclass
class Sequence:
    token_ids: list[int]
    mask: list[int]  # 1 on trainable (sampled) tokens
    logprobs: list[float]  # the sampler's log-probability on trainable tokens, NaN elsewhere


@dataclass
class TokenizedResult:
    token_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    advantage: float = 0.0
    weight: float = 0.0
    trajectory: int = 0  # index of the trajectory in the batch
    where: str = ""  # the trajectory in the inputs, for messages: inputs line N.trajectories[i]
    prompt_id: int = 0
    prompt_length: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_trainable(self) -> int:
        return sum(self.mask)


def is_choice(item: Any) -> bool:
    return isinstance(item, dict) and "message" in item and "role" not in item


def _logprob_entries(choice: dict[str, Any]) -> list[dict[str, Any]]:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return []
    content = logprobs.get("content")
    return content if isinstance(content, list) else []


def _token_ids(ids: Any, vocab_size: int, where: str, name: str) -> list[int]:
    """A list of token ids from the inputs, each an integer in [0, vocab_size)."""
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(f"{where}: {name} must be a list of integers")
    for i in ids:
        if not 0 <= i < vocab_size:
            raise InputError(f"{where}: {name} holds token id {i}, outside the model's vocabulary [0, {vocab_size})")
    return ids


def _choice_tokens(tokenizer: Any, choice: dict[str, Any], where: str, vocab_size: int) -> tuple[list[int], list[float]]:
    """The sampled token ids of a Choice and their log-probabilities (NaN when not reported)."""
    entries = _logprob_entries(choice)
    name = "token_ids" if choice.get("token_ids") else "completion_token_ids"
    ids = choice.get(name)
    if ids is not None:
        _token_ids(ids, vocab_size, where, name)
        if entries and len(entries) != len(ids):
            raise InputError(f"{where}: {len(entries)} logprobs for {len(ids)} token_ids")
        return list(ids), [_entry_logprob(e, where) for e in entries] if entries else [NAN] * len(ids)
    if not entries:
        # A Choice without logprobs (only trainable with allow_training_without_logprobs): re-encode its text.
        ids = _encode(tokenizer, choice["message"].get("content") or "", f"{where}.message")
        return ids, [NAN] * len(ids)
    token_ids: list[int] = []
    for k, entry in enumerate(entries):
        token = entry.get("token") if isinstance(entry, dict) else None
        if not isinstance(token, str):
            raise InputError(f"{where}: a logprobs entry has no token")
        if token.startswith("token_id:"):
            try:
                token_id = int(token[len("token_id:") :])
            except ValueError as error:
                raise InputError(f"{where}: malformed token {token!r}") from error
            token_ids += _token_ids([token_id], vocab_size, where, f"logprobs.content[{k}].token")
        else:
            token_id = tokenizer.convert_tokens_to_ids(token)
            if token_id is None or token_id == tokenizer.unk_token_id and token != tokenizer.unk_token:
                raise InputError(f"{where}: token {token!r} is not in the tokenizer's vocabulary (serve with --return-tokens-as-token-ids)")
            token_ids.append(token_id)
    return token_ids, [_entry_logprob(e, where) for e in entries]


def _entry_logprob(entry: Any, where: str) -> float:
    value = entry.get("logprob") if isinstance(entry, dict) else None
    if value is None:
        return NAN
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: logprob must be a number, got {value!r}")
    return float(value)


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list) or not all(isinstance(call, dict) and isinstance(call.get("function", {}), dict) for call in calls):
        raise InputError(f"{where}: tool_calls must be a list of tool call objects (each with a `function` object), got {_preview(calls)}")
    out = []
    for call in calls:
        call = dict(call)
        function = call.get("function")
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            # Templates that iterate `arguments|items` need a dict; templates that print a string get JSON back.
            try:
                function = {**function, "arguments": json.loads(function["arguments"])}
            except json.JSONDecodeError:
                pass
            call["function"] = function
        out.append(call)
    return out


def _preview(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    message = dict(item)
    if message.get("content") is None:
        message["content"] = ""
    if message.get("tool_calls"):
        message["tool_calls"] = _tool_calls(message["tool_calls"], where)
    return message


def _tools(tools: Any, where: str) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise InputError(f"{where}: tools must be a list of tool objects, got {_preview(tools)}")
    return [tool if "type" in tool else {"type": "function", "function": tool} for tool in tools]


def _unicode(text: str, where: str) -> str:
    """`text`, refused when it holds a lone surrogate (a JSON escape such as \\ud800 without its pair): it is not
    Unicode text, and no tokenizer encodes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(f"{where}: the text holds a lone surrogate {text[error.start]!r}, which is not valid Unicode") from error
    return text


def _encode(tokenizer: Any, text: Any, where: str) -> list[int]:
    """The token ids of a trainable turn's own text (content re-encoded when no sampled ids are given)."""
    if not isinstance(text, str):
        raise InputError(f"{where}: content must be a string to be trained without its sampled tokens")
    return tokenizer.encode(_unicode(text, where), add_special_tokens=False)


def _trainable(item: Any, allow_without_logprobs: bool) -> bool:
    if is_choice(item):
        return bool(_logprob_entries(item)) or allow_without_logprobs
    return isinstance(item, dict) and item.get("role") == "assistant" and allow_without_logprobs


def untrainable_reason(items: list[Any], allow_without_logprobs: bool) -> str:
    """Why the items of a trajectory's histories (all of them together) hold no trainable token."""
    choices = [item for item in items if is_choice(item)]
    assistant = [item for item in items if isinstance(item, dict) and item.get("role") == "assistant"]
    if choices and not allow_without_logprobs and not any(_logprob_entries(choice) for choice in choices):
        return "its assistant Choices have no logprobs: request logprobs=True from the engine (or set allow_training_without_logprobs)"
    if not choices and assistant and not allow_without_logprobs:
        return "its assistant turns are plain messages, not Choices with logprobs (set allow_training_without_logprobs to train them)"
    if not choices and not assistant:
        return "it holds no assistant turn (no Choice in messages_and_choices, no response in exchanges.chat_completions)"
    return "its assistant turns hold no sampled tokens"


EXCHANGE_KINDS = ("chat_completions", "completions", "responses", "messages")


@dataclass
class _Branch:
    items: list[Any]  # messages, and Choices for the replies sampled in this conversation
    keys: list[str]  # one per item, to compare with the messages of a later request
    context: str  # the request's tools and chat_template_kwargs
    order: tuple[int, ...]


def _message_key(message: dict[str, Any]) -> str:
    """A message as ART compares a request's messages with an earlier conversation (`normalize_chat_message`,
    visible fields only): no nulls, annotations or reasoning; an assistant message's missing content reads ""."""
    data = {k: v for k, v in message.items() if v is not None and k not in ("annotations", "reasoning", "reasoning_content")}
    if data.get("role") == "assistant":
        data.setdefault("content", "")
    if data.get("tool_calls") == []:
        del data["tool_calls"]
    return json.dumps(data, sort_keys=True, default=str)


def exchange_histories(exchanges: Any, where: str) -> list[tuple[list[Any], Any, str]]:
    """A generation-C trajectory's `exchanges` as histories (items, tools, where), as ART 0.5.23 groups them
    (art/trajectories/_history.py `chat_completions_histories`): the exchanges in order, each request's messages as
    context and each choice of its response as a trainable Choice (with the response's `prompt_token_ids`, as vLLM
    returns them beside `token_ids` on the choice). A request whose messages (with the same tools) extend an earlier
    conversation, its messages followed by its sampled reply, continues that conversation (the longest, then the
    earliest); any other request starts a conversation of its own. Only chat_completions are read: other kinds are
    refused by name rather than left untrained."""
    where = f"{where}.exchanges"
    if not isinstance(exchanges, dict):
        raise InputError(f"{where} must be an object")
    for kind in EXCHANGE_KINDS[1:]:
        if exchanges.get(kind):
            raise InputError(f"{where}: exchanges of kind {kind} are not trained (only chat_completions are)")
    recorded = exchanges.get("chat_completions") or []
    if not isinstance(recorded, list):
        raise InputError(f"{where}.chat_completions must be a list")
    branches: list[_Branch] = []
    for n, exchange in enumerate(recorded):
        ewhere = f"{where}.chat_completions[{n}]"
        request = exchange.get("request") if isinstance(exchange, dict) else None
        response = exchange.get("response") if isinstance(exchange, dict) else None
        if not isinstance(request, dict) or not isinstance(response, dict):
            raise InputError(f"{ewhere} must be an object with a request and a response object")
        prompt = request.get("messages") or []
        if not isinstance(prompt, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in prompt):
            raise InputError(f"{ewhere}.request.messages must be a list of chat messages")
        choices = response.get("choices") or []
        if not isinstance(choices, list) or not all(is_choice(c) and isinstance(c["message"], dict) for c in choices):
            raise InputError(f"{ewhere}.response.choices must be a list of Choices (objects with a message object)")
        context = json.dumps([request.get("tools"), request.get("chat_template_kwargs")], sort_keys=True, default=str)
        keys = [_message_key(m) for m in prompt]
        candidates = [b for b in branches if b.context == context and b.keys == keys[: len(b.keys)] and len(b.keys) <= len(keys)]
        parent = min(candidates, key=lambda b: (-len(b.keys), b.order)) if candidates else None
        if parent is not None:
            branches.remove(parent)
        base_items, base_order = (parent.items, parent.order) if parent else ([], (n,))
        for k, choice in enumerate(choices):
            index = choice.get("index")
            if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
                raise InputError(f"{ewhere}.response.choices[{k}].index must be an integer, got {_preview(index)}")
        for k, choice in enumerate(sorted(choices, key=lambda c: c.get("index") or 0)):
            if "prompt_token_ids" not in choice and response.get("prompt_token_ids") is not None:
                choice = {**choice, "prompt_token_ids": response["prompt_token_ids"]}
            items = [*base_items, *prompt[len(base_items) :], choice]
            branches.append(_Branch(items, [*keys, _message_key(choice["message"])], context, (*base_order, k)))
    return [(b.items, json.loads(b.context)[0], f"{where}.chat_completions[{b.order[0]}]") for b in sorted(branches, key=lambda b: b.order)]


def tokenize_history(
    tokenizer: Any,
    items: list[Any],
    tools: Any,
    *,
    allow_training_without_logprobs: bool = False,
    chat_template_kwargs: dict[str, Any] | None = None,
    where: str = "history",
    vocab_size: int | None = None,
) -> list[Sequence]:
    """One history to its token sequences (usually one; several when exact-id turns do not extend each other).
    `vocab_size`: the rows of the model's token embedding, which every token id given in the inputs must index
    (default: the tokenizer's length)."""
    if vocab_size is None:
        vocab_size = len(tokenizer)
    if not isinstance(items, list):
        raise InputError(f"{where}: messages_and_choices must be a list")
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not (is_choice(item) or isinstance(item.get("role"), str)):
            raise InputError(f"{where}.messages_and_choices[{index}] is neither a message nor a Choice")
        if is_choice(item) and not isinstance(item["message"], dict):
            raise InputError(f"{where}.messages_and_choices[{index}].message must be an object")
    last = max((i for i, item in enumerate(items) if _trainable(item, allow_training_without_logprobs)), default=-1)
    if last < 0:
        return []
    items = items[: last + 1]
    trainable = [i for i, item in enumerate(items) if _trainable(item, allow_training_without_logprobs)]
    choices = [items[i] for i in trainable if is_choice(items[i])]
    if choices and len(choices) == len(trainable) and all(c.get("prompt_token_ids") and c.get("token_ids") for c in choices):
        return _exact_sequences(tokenizer, choices, where, vocab_size)
    return [_spliced_sequence(tokenizer, items, trainable, tools, chat_template_kwargs or {}, where, vocab_size)]


def _exact_sequences(tokenizer: Any, choices: list[dict[str, Any]], where: str, vocab_size: int) -> list[Sequence]:
    sequences: list[Sequence] = []
    current: Sequence | None = None
    for n, choice in enumerate(choices):
        prompt = _token_ids(choice["prompt_token_ids"], vocab_size, f"{where} choice {n}", "prompt_token_ids")
        ids, logprobs = _choice_tokens(tokenizer, choice, f"{where} choice {n}", vocab_size)
        if current is not None and len(prompt) >= len(current.token_ids) and prompt[: len(current.token_ids)] == current.token_ids:
            gap = prompt[len(current.token_ids) :]  # tokens between the turns (tool results, the next user turn)
            current.token_ids += gap + ids
            current.mask += [0] * len(gap) + [1] * len(ids)
            current.logprobs += [NAN] * len(gap) + logprobs
        else:
            current = Sequence(list(prompt) + ids, [0] * len(prompt) + [1] * len(ids), [NAN] * len(prompt) + logprobs)
            sequences.append(current)
    return sequences


def render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, kwargs: dict[str, Any], where: str, **options: Any) -> str:
    tools = _tools(tools, where)
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **options, **kwargs)
    except Exception as error:  # a template that raises on these messages: the inputs are unusable
        raise InputError(f"{where}: the chat template failed on these messages: {error}") from error
    return _unicode(text, where)


def _opens_thinking(tokenizer: Any, ids: list[int]) -> bool:
    return bool(ids) and tokenizer.decode([ids[0]]) == "<think>"


def _spliced_sequence(tokenizer: Any, items: list[Any], trainable: list[int], tools: Any, kwargs: dict[str, Any], where: str, vocab_size: int) -> Sequence:
    messages: list[dict[str, Any]] = []
    spliced: list[tuple[list[int], list[float], bool]] = []  # ids, logprobs, whether they are a Choice's sampled tokens
    for index, item in enumerate(items):
        iwhere = f"{where}.messages_and_choices[{index}]"
        if index in trainable:
            if is_choice(item):
                ids, logprobs = _choice_tokens(tokenizer, item, iwhere, vocab_size)
            else:
                if item.get("tool_calls"):
                    raise InputError(f"{iwhere}: an assistant message with tool_calls cannot be trained without its sampled tokens")
                ids = _encode(tokenizer, item.get("content") or "", iwhere)
                logprobs = [NAN] * len(ids)
            # The sampled tokens already hold any tool-call text, so the template gets the placeholder alone.
            messages.append({"role": "assistant", "content": _PLACEHOLDER.format(len(spliced))})
            spliced.append((ids, logprobs, is_choice(item) and bool(_logprob_entries(item))))
        elif is_choice(item):
            message = item["message"]
            messages.append(_message({"role": "assistant", "content": message.get("content"), **({"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {})}, f"{iwhere}.message"))
        else:
            messages.append(_message(item, iwhere))
    text = render(tokenizer, messages, tools, kwargs, where, add_generation_prompt=False)
    # continue_final_message: nothing after the last trainable turn (no end-of-turn of the template's own).
    last = _PLACEHOLDER.format(len(spliced) - 1)
    end = text.rfind(last)
    if end < 0:
        raise InputError(f"{where}: the chat template dropped an assistant turn")
    text = text[: end + len(last)]
    parts = _PLACEHOLDER_RE.split(text)
    if len(parts) != 2 * len(spliced) + 1:
        raise InputError(f"{where}: the chat template dropped or repeated an assistant turn")
    seq = Sequence([], [], [])
    for k, part in enumerate(parts):
        if k % 2 == 0:
            ids = tokenizer.encode(part, add_special_tokens=False) if part else []
            if seq.token_ids and ids and seq.mask[-1] == 1 and ids[0] == seq.token_ids[-1]:
                ids = ids[1:]  # the sampled end-of-turn token: drop the template's copy
            seq.token_ids += ids
            seq.mask += [0] * len(ids)
            seq.logprobs += [NAN] * len(ids)
        else:
            ids, logprobs, sampled = spliced[int(part)]
            if sampled and _opens_thinking(tokenizer, ids) and len(seq.token_ids) >= 4 and _opens_thinking(tokenizer, seq.token_ids[-4:]):
                # ART's rule for Qwen3 templates, which render an empty think block (<think>, "\n\n", </think>, "\n\n")
                # before the last assistant turn's content: sampled tokens that open their own think block replace it,
                # as in the prompt the engine sampled them from.
                del seq.token_ids[-4:], seq.mask[-4:], seq.logprobs[-4:]
            seq.token_ids += ids
            seq.mask += [1] * len(ids)
            seq.logprobs += logprobs
    return seq


def _header(tokenizer: Any, message: dict[str, Any], tools: Any, kwargs: dict[str, Any], where: str) -> str:
    """The text a template renders before the content of `message` when it opens the conversation: templates refuse
    an empty conversation, so the turn is rendered alone with a placeholder for its content."""
    text = render(tokenizer, [{**message, "content": _PLACEHOLDER.format(0)}], tools, kwargs, where, add_generation_prompt=False)
    start = text.find(_PLACEHOLDER.format(0))
    if start < 0:
        raise InputError(f"{where}: the chat template dropped the assistant turn that opens the conversation")
    return text[:start]


def sft_sequence(tokenizer: Any, row: Any, assistant_turns: str, kwargs: dict[str, Any] | None = None, where: str = "row") -> Sequence:
    """An SFT row to tokens, with the assistant turns (or the last one) as the only trainable tokens.

    The span of assistant turn i is the text between the render of messages[:i] with a generation prompt and the
    render of messages[:i+1]: the turn's content, tool calls and end-of-turn marker. A turn that opens the
    conversation has no messages before it to render: its span starts where the render of that turn alone puts its
    content (after its header and any default system prompt of the template).
    """
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list) or not row["messages"]:
        raise InputError(f"{where}: an SFT row must be an object with a non-empty messages list")
    messages = []
    for index, message in enumerate(row["messages"]):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InputError(f"{where}.messages[{index}] is not a chat message")
        messages.append(_message(message, f"{where}.messages[{index}]"))
    tools = row.get("tools")
    kwargs = kwargs or {}
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if assistant_turns == "last":
        if messages[-1]["role"] != "assistant":
            raise InputError(f"{where}: assistant_turns=last needs the last message to be an assistant message")
        assistant = assistant[-1:]
    full = render(tokenizer, messages, tools, kwargs, where, add_generation_prompt=False)
    spans = []
    for i in assistant:
        before = render(tokenizer, messages[:i], tools, kwargs, where, add_generation_prompt=True) if i else _header(tokenizer, messages[0], tools, kwargs, where)
        after = render(tokenizer, messages[: i + 1], tools, kwargs, where, add_generation_prompt=False)
        if i == 0 and not after.startswith(before):
            raise InputError(f"{where}: the chat template renders the assistant turn that opens the conversation in a way the trainer cannot split "
                             "(the text before its content depends on the content); start the row with a user or system message")
        if not (after.startswith(before) and full.startswith(after)):
            raise InputError(f"{where}: the chat template renders assistant turn {i} differently in a longer conversation; use assistant_turns=last")
        spans.append((len(before), len(after)))
    seq = Sequence([], [], [])
    cursor = 0
    for start, end in spans:
        for piece, trainable in ((full[cursor:start], 0), (full[start:end], 1)):
            ids = tokenizer.encode(piece, add_special_tokens=False) if piece else []
            seq.token_ids += ids
            seq.mask += [trainable] * len(ids)
        cursor = end
    rest = tokenizer.encode(full[cursor:], add_special_tokens=False) if full[cursor:] else []
    seq.token_ids += rest
    seq.mask += [0] * len(rest)
    seq.logprobs = [NAN] * len(seq.token_ids)
    return seq


def is_nan(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)
