"""JSON log lines (``SHELLY_LOG_FORMAT=json``): the context's run, session, agent and worker, and
the trace id when a span is active."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from shelly_dist.errors import ConfigError
from shelly_dist.identity import acting_as
from shelly_dist.observability import logs


def line(message: str = "hello %s", *args: object, exc_info: object = None) -> dict[str, object]:
    record = logging.LogRecord("shelly_dist.x", logging.WARNING, __file__, 1, message, args, exc_info)  # type: ignore[arg-type]
    return json.loads(logs.JsonFormatter().format(record))


def test_a_line_carries_the_run_session_agent_and_worker_of_its_context(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(logs, "_worker", "shelly@w1")
    with acting_as("helper-inspect-1", run="r-1", session="s-1"):
        out = line("hello %s", "there")
    assert out["message"] == "hello there"
    assert out["level"] == "WARNING"
    assert out["logger"] == "shelly_dist.x"
    assert (out["run"], out["session"], out["agent"], out["worker"]) == ("r-1", "s-1", "helper-inspect-1", "shelly@w1")
    assert "trace_id" not in out


def test_a_line_outside_any_run_has_no_empty_fields():
    assert set(line()) == {"time", "level", "logger", "message"}


def test_a_line_under_an_active_span_carries_its_trace_id():
    context = SpanContext(trace_id=0xABC, span_id=0x1, is_remote=False, trace_flags=TraceFlags(1))
    with trace.use_span(NonRecordingSpan(context)):
        out = line()
    assert out["trace_id"] == f"{0xABC:032x}"


def test_an_exception_is_one_field_of_the_line():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        out = line("failed", exc_info=sys.exc_info())
    assert "ValueError: boom" in str(out["exception"])


def test_an_unknown_log_format_names_the_variable():
    with pytest.raises(ConfigError, match=r"SHELLY_LOG_FORMAT: unknown log format 'xml' \(known: text, json\)"):
        logs.log_format({"SHELLY_LOG_FORMAT": "xml"})
