"""The GenAI spans in one process: names and attributes, a tool error, content capture opt-in,
and the W3C context a child request carries."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shelly_dist.agent.records import ChildRequest
from shelly_dist.chats import ToolResult
from shelly_dist.observability import tracing


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Spans of this test, from a tracer provider of its own."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", lambda: provider.get_tracer("test"))
    return exporter


async def _nothing() -> None:
    return None


async def test_a_tool_call_with_an_error_result_is_an_error_span(exported: InMemorySpanExporter):
    results = {"c1": ToolResult(tool_call_id="c1", content="no such file", is_error=True)}
    await tracing.execute_tool("fs_read", "c1", _nothing(), results)
    (span,) = exported.get_finished_spans()
    assert span.name == "execute_tool fs_read"
    assert span.attributes["gen_ai.tool.name"] == "fs_read"
    assert span.attributes["gen_ai.tool.call.id"] == "c1"
    assert span.status.status_code.name == "ERROR"


def test_a_child_request_carries_the_context_of_the_span_it_was_built_in(exported: InMemorySpanExporter):
    with tracing.invoke_agent("lead", "r1", session="s1") as span:
        request = ChildRequest(key="k", tool_call_id="c", index=0, agent="helper", task="t", depth=1,
                               visited=[], parent_run_id="r1", parent_agent="lead")
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert request.trace["traceparent"].split("-")[1] == trace_id
    with tracing.invoke_agent("helper", "r2", parent=request.trace, resumed=True):
        pass
    lead, helper = sorted(exported.get_finished_spans(), key=lambda s: s.name != "invoke_agent lead")
    assert helper.parent.span_id == lead.context.span_id
    assert helper.attributes["shelly.resumed"] is True
    assert lead.attributes["gen_ai.conversation.id"] == "s1"
    assert lead.attributes["gen_ai.agent.name"] == "lead" and lead.attributes["gen_ai.agent.id"] == "r1"


def test_message_content_is_recorded_only_when_capture_is_on(exported: InMemorySpanExporter,
                                                            monkeypatch: pytest.MonkeyPatch):
    for capture in ("", "true"):
        monkeypatch.setenv(tracing.CAPTURE_CONTENT, capture)
        with tracing.chat("openai", "gpt-x") as span:
            tracing.record_reply(span, input_tokens=3, output_tokens=2, cost_usd=0.1, finish_reason="stop",
                                 text="secret answer")
    off, on = exported.get_finished_spans()
    assert "gen_ai.output.messages" not in off.attributes
    assert on.attributes["gen_ai.output.messages"] == "secret answer"
    assert off.attributes["gen_ai.usage.input_tokens"] == 3
    assert off.attributes["gen_ai.response.finish_reasons"] == ("stop",)


def test_without_a_span_a_child_request_carries_no_context():
    request = ChildRequest(key="k", tool_call_id="c", index=0, agent="helper", task="t", depth=1,
                           visited=[], parent_run_id="r1", parent_agent="lead")
    assert request.trace == {}


async def test_a_tool_errors_text_is_on_its_span_only_when_capture_is_on(exported: InMemorySpanExporter,
                                                                          monkeypatch: pytest.MonkeyPatch):
    results = {"c1": ToolResult(tool_call_id="c1", content="DB_PASSWORD=hunter2 in .env.prod", is_error=True)}
    for capture in ("", "true"):
        monkeypatch.setenv(tracing.CAPTURE_CONTENT, capture)
        await tracing.execute_tool("fs_read", "c1", _nothing(), results)
    off, on = exported.get_finished_spans()
    assert "hunter2" not in repr(off.status.description) and "hunter2" not in repr(dict(off.attributes))
    assert off.status.status_code.name == "ERROR"
    assert on.status.description == "DB_PASSWORD=hunter2 in .env.prod"
