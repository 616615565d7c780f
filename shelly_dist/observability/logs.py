"""Structured logs: one JSON object per line when ``SHELLY_LOG_FORMAT=json``.

A pool's logs go to a log pipeline (Loki, Elasticsearch, CloudWatch) where a line is found by its
fields, not grepped: each line carries the run, session and agent of the context that logged it
(the contextvars of :mod:`shelly_dist.identity`, set around every step), the worker's node name,
and the trace id when an OpenTelemetry span is active, so a log line leads to its trace.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from shelly_dist.errors import ConfigError
from shelly_dist.identity import agent_name, run_id, session_id

ENV_FORMAT = "SHELLY_LOG_FORMAT"
FORMATS = ("text", "json")

_worker = ""


def log_format(env: dict[str, str] | None = None) -> str:
    """``text`` (the default) or ``json``, from ``$SHELLY_LOG_FORMAT``; another value is a
    ``ConfigError`` naming the variable."""
    value = ((os.environ if env is None else env).get(ENV_FORMAT) or "text").strip().lower()
    if value not in FORMATS:
        raise ConfigError(f"{ENV_FORMAT}: unknown log format {value!r} (known: {', '.join(FORMATS)})")
    return value


def set_worker(name: str) -> None:
    """The node name every line of this process carries as ``worker`` (``shelly worker`` sets it)."""
    global _worker
    _worker = name


def trace_id() -> str:
    """The active span's trace id (32 hex digits), or "" without one (or without OpenTelemetry)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return ""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: time, level, logger, message, and the context's fields (those
    with a value only)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = {"run": run_id(), "session": session_id(), "agent": agent_name(), "worker": _worker,
                   "trace_id": trace_id()}
        line.update({k: v for k, v in context.items() if v})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def use_json(*loggers: logging.Logger) -> None:
    """Give every handler of ``loggers`` (the root logger by default) the JSON formatter."""
    for logger in loggers or (logging.getLogger(),):
        for handler in logger.handlers:
            handler.setFormatter(JsonFormatter())
