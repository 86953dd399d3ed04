"""The openai Python SDK, unchanged, against trainyard's inference gateway (fake engine behind it)."""

from __future__ import annotations

import uuid

import openai
import pytest


def client(stack, **kwargs) -> openai.OpenAI:
    options = {"base_url": stack.v1, "api_key": stack.key, "max_retries": 0, **kwargs}
    return openai.OpenAI(**options)


def hello(stack, c: openai.OpenAI | None = None, **kwargs):
    return (c or client(stack)).chat.completions.create(
        model=stack.base_model, messages=[{"role": "user", "content": "hello"}], max_tokens=3, **kwargs
    )


def test_chat_completion_answers_with_choices_and_usage(stack):
    completion = hello(stack)
    assert completion.model == stack.base_model
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_streamed_chat_completion_ends_with_the_usage_chunk_when_asked(stack):
    stream = hello(stack, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content
    assert all(c.model == stack.base_model for c in chunks)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_streamed_chat_completion_has_no_usage_chunk_unless_asked(stack):
    chunks = list(hello(stack, stream=True))
    assert chunks and all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_raw_response_carries_the_request_id(stack):
    request_id = f"py-{uuid.uuid4().hex}"
    raw = client(stack).chat.completions.with_raw_response.create(
        model=stack.base_model,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=3,
        extra_headers={"x-request-id": request_id},
    )
    assert raw.status_code == 200
    assert raw.headers["x-request-id"] == request_id
    assert raw.request_id == request_id
    assert raw.parse().choices[0].message.content
    sent = [r for r in stack.engine("GET", "/requests")["requests"] if r["headers"].get("x-request-id") == request_id]
    assert len(sent) == 1


def test_models_list_includes_the_served_base_model(stack):
    ids = [m.id for m in client(stack).models.list()]
    assert stack.base_model in ids


def test_project_option_records_usage_under_that_project(stack):
    project = f"usage-{uuid.uuid4().hex[:8]}"
    c = client(stack, project=f"{stack.entity}/{project}")
    completion = hello(stack, c)
    report = stack.ok("GET", f"/v1/usage?project={stack.entity}/{project}")
    assert report["project"] == f"{stack.entity}/{project}"
    assert [(b["requests"], b["total_tokens"]) for b in report["data"]] == [(1, completion.usage.total_tokens)]
    other = stack.ok("GET", f"/v1/usage?project={stack.entity}/{project}-other")
    assert sum(b["requests"] for b in other["data"]) == 0


def test_wrong_key_is_an_authentication_error(stack):
    with pytest.raises(openai.AuthenticationError) as caught:
        hello(stack, client(stack, api_key="ty_not-a-key"))
    assert caught.value.status_code == 401
    assert caught.value.body["code"] == "invalid_api_key"


def test_unknown_model_is_not_found(stack):
    with pytest.raises(openai.NotFoundError) as caught:
        client(stack).chat.completions.create(model="no/such-model", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 404
    assert caught.value.body["code"] == "model_not_found"


def test_invalid_body_is_an_unprocessable_entity_error(stack):
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client(stack).chat.completions.create(model=stack.base_model, messages=[{"role": "user", "content": "hi"}], temperature="hot")  # type: ignore[arg-type]
    assert caught.value.status_code == 422
    assert caught.value.body["type"] == "invalid_request_error"


def test_engine_rate_limit_is_a_rate_limit_error(stack):
    stack.engine("POST", "/behaviour", {"behaviour": {"kind": "status", "status": 429, "message": "slow down", "retryAfter": "30"}, "times": 1})
    with pytest.raises(openai.RateLimitError) as caught:
        hello(stack)
    assert caught.value.status_code == 429
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "30"


def test_engine_failure_is_an_internal_server_error(stack):
    stack.engine("POST", "/behaviour", {"behaviour": {"kind": "status", "status": 500, "message": "engine broke"}, "times": 1})
    with pytest.raises(openai.InternalServerError) as caught:
        hello(stack)
    # vLLM's own 500 reaches the client as a 500 with the engine's message, never naming the engine.
    assert caught.value.status_code == 500
    assert caught.value.body == {"message": "engine broke", "type": "server_error", "param": None, "code": "engine_error"}
