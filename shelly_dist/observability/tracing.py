"""OpenTelemetry spans after the GenAI semantic conventions: ``invoke_agent <agent>`` per run,
``chat <model>`` per model call, ``execute_tool <tool>`` per tool call.

Only ``opentelemetry-api`` is imported here: without an SDK configured the API's no-op tracer
makes every span below a few attribute-less calls, and nothing is exported.
:func:`configure_from_env` installs the SDK (the ``otel`` extra) in a process when the standard
``OTEL_*`` variables ask for an exporter.

One trace per tree, across processes: a child's ``ChildRequest`` carries the W3C context of the
parent's ``execute_tool delegate`` span (:func:`carrier`, captured when the request is built), and
the child record journals the request, so whichever worker starts, resumes or redoes the child
opens its ``invoke_agent`` span under that same parent (:func:`invoke_agent` with ``parent``).
The journal survives suspension, redelivery and reaping, which Celery's headers do not.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from shelly_dist import identity

log = logging.getLogger(__name__)

TRACER = "shelly_dist"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SYSTEM = "shelly"
"""``gen_ai.provider.name`` of the agent spans (the model spans name the provider kind)."""


def _tracer() -> trace.Tracer | None:
    """The tracer, or ``None`` while no SDK is installed (the API's proxy or no-op provider): the
    spans below then cost one type check instead of a no-op span each (30-40 µs measured)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer(TRACER)


def _span(name: str, kind: SpanKind, attributes: dict[str, Any], context: Any = None) -> Any:
    tracer = _tracer()
    if tracer is None:
        return contextlib.nullcontext(trace.INVALID_SPAN)
    return tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes)


def capture_content() -> bool:
    """Whether message content may go on spans (opt-in, as the conventions require)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


def carrier() -> dict[str, str]:
    """The current span's context as W3C headers (``traceparent``…); empty without an active span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    out: dict[str, str] = {}
    propagate.inject(out)
    return out


@contextlib.contextmanager
def invoke_agent(
    agent: str, run_id: str, *, session: str = "", parent: Mapping[str, str] | None = None,
    resumed: bool = False, retry: bool = False,
) -> Iterator[Span]:
    """The span of one run's work in this process (a resumed run opens another, under the same
    parent; a redone step's is marked ``shelly.retry``). ``agent`` is the config name."""
    ctx = propagate.extract(dict(parent)) if parent else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": SYSTEM,
        "gen_ai.agent.name": agent, "gen_ai.agent.id": run_id,
    }
    if session:
        attributes["gen_ai.conversation.id"] = session
    if resumed:
        attributes["shelly.resumed"] = True
    if retry:
        attributes["shelly.retry"] = True
    with _span(f"invoke_agent {agent}", SpanKind.INTERNAL, attributes, ctx) as span:
        yield span


@contextlib.contextmanager
def chat(system: str, model: str, *, provider: str = "") -> Iterator[Span]:
    """The span of one model call (its retries included): ``system`` is the provider's kind
    (``openai``, ``anthropic``…), ``provider`` its config name."""
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": system, "gen_ai.request.model": model,
                  "shelly.provider": provider or system}
    if agent := identity.agent_name():  # the call's cost (``shelly.cost_usd``) per agent
        attributes["gen_ai.agent.name"] = agent
    with _span(f"chat {model}", SpanKind.CLIENT, attributes) as span:
        yield span


def record_reply(span: Span, *, input_tokens: int, output_tokens: int, cost_usd: float,
                 finish_reason: str = "", text: str = "") -> None:
    """A model call's usage, cost and finish reason on its ``chat`` span (its text only when
    content capture is on)."""
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    span.set_attribute("shelly.cost_usd", cost_usd)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    if text and capture_content():
        span.set_attribute("gen_ai.output.messages", text)


async def execute_tool(name: str, call_id: str, job: Awaitable[None], results: Mapping[str, Any]) -> None:
    """Await ``job`` (one tool call of a step) inside its ``execute_tool`` span; an error result
    found in ``results`` under ``call_id`` afterwards marks the span as an error, described by the
    result's text only when content capture is on (a tool's output is content: a file read, a
    command's output)."""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
    with _span(f"execute_tool {name}", SpanKind.INTERNAL, attributes) as span:
        await job
        result = results.get(call_id)
        if result is not None and getattr(result, "is_error", False):
            said = str(getattr(result, "content", ""))[:200] if capture_content() else "the tool answered an error"
            span.set_status(Status(StatusCode.ERROR, said))
            span.set_attribute("error.type", "tool_error")


def configure_from_env(service: str) -> bool:
    """Install the OpenTelemetry SDK with an OTLP/HTTP exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (or ``…_TRACES_ENDPOINT``) is set and ``OTEL_SDK_DISABLED`` is not; ``OTEL_SERVICE_NAME``
    (default ``service``) and the other ``OTEL_*`` variables are read by the SDK. Whether it did:
    without the ``otel`` extra it logs the pip line and leaves the no-op tracer."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or not (
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    if isinstance(trace.get_tracer_provider(), _sdk_provider_type()):
        return True  # already configured (by us, or by the application embedding us)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing: OTEL_EXPORTER_OTLP_ENDPOINT is set but the SDK is not installed: "
                    "pip install 'shelly-dist[otel]'")
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


def _sdk_provider_type() -> type:
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return type(None)
    return TracerProvider


def shutdown() -> None:
    """Export what is buffered (at process exit); nothing without an SDK."""
    provider = trace.get_tracer_provider()
    with contextlib.suppress(Exception):
        provider.shutdown()  # type: ignore[attr-defined]


__all__ = ["carrier", "chat", "configure_from_env", "execute_tool", "invoke_agent", "record_reply", "shutdown"]
