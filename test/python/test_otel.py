"""The OpenTelemetry Python SDK and its OTLP/HTTP protobuf exporter, unchanged, against trainyard's
/traces/otel/v1/traces, configured as W&B's docs configure them for Weave (Basic auth with `api:<key>`, a
`project_id` header). The spans are read back as calls through the tracing API."""

from __future__ import annotations

import base64
import uuid

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode


class Recorder(SpanExporter):
    """Passes spans to the OTLP exporter and keeps each export's result (the SDK only logs a failure)."""

    def __init__(self, exporter: OTLPSpanExporter) -> None:
        self.exporter = exporter
        self.results: list[SpanExportResult] = []

    def export(self, spans):
        result = self.exporter.export(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()


def tracer_for(stack, headers: dict[str, str], compression: Compression = Compression.NoCompression, resource: dict | None = None):
    recorder = Recorder(OTLPSpanExporter(endpoint=f"{stack.url}/traces/otel/v1/traces", headers=headers, compression=compression, timeout=20))
    provider = TracerProvider(resource=Resource.create(resource or {"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(recorder))
    return provider.get_tracer("trainyard-test"), provider, recorder


def basic(key: str) -> str:
    return "Basic " + base64.b64encode(f"api:{key}".encode()).decode()


@pytest.fixture
def project(stack):
    return f"{stack.entity}/otel-{uuid.uuid4().hex[:8]}"


def read_calls(stack, project: str) -> list[dict]:
    return stack.jsonl("/traces/calls/stream_query", {"project_id": project, "sort_by": [{"field": "started_at", "direction": "asc"}]})


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_a_nested_llm_trace_is_stored_as_calls(stack, project, compression):
    tracer, provider, recorder = tracer_for(stack, {"Authorization": basic(stack.key), "project_id": project}, compression)
    with tracer.start_as_current_span("agent.turn") as turn:
        turn.set_attribute("input.value", '{"question": "2+2?"}')
        turn.set_attribute("wandb.display_name", "Turn 1")
        with tracer.start_as_current_span("chat gpt-4o-mini") as llm:
            llm.set_attribute("gen_ai.system", "openai")
            llm.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            llm.set_attribute("gen_ai.prompt.0.role", "user")
            llm.set_attribute("gen_ai.prompt.0.content", "2+2?")
            llm.set_attribute("gen_ai.completion.0.content", "4")
            llm.set_attribute("gen_ai.usage.prompt_tokens", 12)
            llm.set_attribute("gen_ai.usage.completion_tokens", 1)
        turn.set_attribute("output.value", "4")
    trace_id = format(turn.get_span_context().trace_id, "032x")
    provider.shutdown()
    assert recorder.results == [SpanExportResult.SUCCESS, SpanExportResult.SUCCESS]

    calls = read_calls(stack, project)
    assert [c["op_name"] for c in calls] == ["agent.turn", "chat gpt-4o-mini"]
    parent, child = calls
    assert parent["id"] == format(turn.get_span_context().span_id, "016x")
    assert parent["trace_id"] == child["trace_id"] == trace_id
    assert parent["parent_id"] is None and child["parent_id"] == parent["id"]
    assert parent["display_name"] == "Turn 1"
    assert parent["inputs"] == {"input.value": {"question": "2+2?"}}
    assert parent["output"] == {"output.value": "4"}  # only JSON objects and arrays in text are parsed
    assert child["inputs"] == {"gen_ai.prompt": [{"role": "user", "content": "2+2?"}]}
    assert child["output"] == {"gen_ai.completion": [{"content": "4"}]}
    assert child["attributes"]["system"] == "openai" and child["attributes"]["model"] == "gpt-4o-mini"
    assert child["summary"]["usage"] == {"gpt-4o-mini": {"prompt_tokens": 12, "completion_tokens": 1}}
    assert child["exception"] is None and child["ended_at"] is not None


def test_an_error_status_becomes_the_call_exception(stack, project):
    tracer, provider, recorder = tracer_for(stack, {"Authorization": basic(stack.key), "project_id": project})
    with pytest.raises(ValueError):
        with tracer.start_as_current_span("tool.lookup"):
            raise ValueError("no such city")
    with tracer.start_as_current_span("tool.status") as span:
        span.set_status(Status(StatusCode.ERROR, "rate limited"))
    provider.shutdown()
    assert recorder.results == [SpanExportResult.SUCCESS, SpanExportResult.SUCCESS]

    calls = {c["op_name"]: c for c in read_calls(stack, project)}
    # The SDK records the exception as an event and sets the status description to "ValueError: no such city".
    assert calls["tool.lookup"]["exception"] == "ValueError: no such city"
    assert calls["tool.status"]["exception"] == "rate limited"


def test_the_project_can_come_from_resource_attributes(stack, project):
    entity, name = project.split("/")
    tracer, provider, recorder = tracer_for(stack, {"Authorization": basic(stack.key)}, resource={"wandb.entity": entity, "wandb.project": name})
    with tracer.start_as_current_span("from-resource"):
        pass
    provider.shutdown()
    assert recorder.results == [SpanExportResult.SUCCESS]
    assert [c["op_name"] for c in read_calls(stack, project)] == ["from-resource"]


def test_a_wrong_key_fails_the_export_and_stores_nothing(stack, project):
    tracer, provider, recorder = tracer_for(stack, {"Authorization": basic("ty_not-a-key"), "project_id": project})
    with tracer.start_as_current_span("refused"):
        pass
    provider.shutdown()
    assert recorder.results == [SpanExportResult.FAILURE]
    assert read_calls(stack, project) == []


def test_numbers_read_back_as_the_sdk_sent_them(stack, project):
    """A float attribute with a whole value is a protobuf double: it reads back as a float (1.0, not 1), as
    do whole floats in a JSON text attribute; an int beyond 2^53 keeps every digit."""
    tracer, provider, recorder = tracer_for(stack, {"Authorization": basic(stack.key), "project_id": project})
    with tracer.start_as_current_span("chat m") as llm:
        llm.set_attribute("gen_ai.request.model", "m")
        llm.set_attribute("gen_ai.request.temperature", 1.0)
        llm.set_attribute("gen_ai.request.top_p", 0.5)
        llm.set_attribute("gen_ai.request.seed", 2**62 + 1)
        llm.set_attribute("gen_ai.prompt", '{"rewards": [1.0, 0.0, 2], "id": 12345678901234567890}')
    provider.shutdown()
    assert recorder.results == [SpanExportResult.SUCCESS]

    [call] = read_calls(stack, project)
    parameters = call["attributes"]["model_parameters"]
    assert parameters == {"model": "m", "temperature": 1.0, "top_p": 0.5, "seed": 2**62 + 1}
    assert isinstance(parameters["temperature"], float) and isinstance(parameters["seed"], int)
    rewards = call["inputs"]["gen_ai.prompt"]["rewards"]
    assert [type(r) for r in rewards] == [float, float, int] and rewards == [1.0, 0.0, 2]
    assert call["inputs"]["gen_ai.prompt"]["id"] == 12345678901234567890
    span_attributes = call["attributes"]["otel_span"]["attributes"]
    assert isinstance(span_attributes["gen_ai.request.temperature"], float) and span_attributes["gen_ai.request.seed"] == 2**62 + 1
