"""The built-in hooks Shelly calls middleware: ``timeout``, ``recovery``, ``logger``,
``output_guardrail``.

They used to wrap ``Run.until_done``, which cannot straddle processes: a run on the pool is many
Celery tasks, so a wrapper never saw it whole (and the pool never ran them). Each is now a hook on
the step machine (:mod:`shelly_dist.agent.hooks`), kept in ``AgentOptions.hooks`` (or, for
compatibility, ``AgentOptions.middleware``, which means the same list), with its memory journaled:

- ``timeout(seconds)``: the run's start is journaled at its first step, and every step is bounded
  by start + ``seconds``, so the deadline holds across suspensions and resumes on other workers;
- ``recovery()``: an unexpected exception fails the run as ``AgentError("agent panicked: …")``;
- ``logger(log, name)``: "agent started" once, "agent finished" (or "agent finished with error")
  with the duration since the journaled start;
- ``output_guardrail(check)``: ``check(reply)`` on the final reply; what it raises fails the run.
  ``output_guardrail("name")`` with a string is the decorator registering a named guardrail.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, overload

from shelly_dist.chats import Message
from shelly_dist.errors import AgentError, ShellyError, StepTimeout
from shelly_dist.extensions import RunContext, output_guardrail_named

Middleware = Any
"""A built-in hook (kept as a name for code that typed ``AgentOptions.middleware``)."""

F = TypeVar("F", bound=Callable[..., Any])


def _started(ctx: RunContext) -> float:
    """The run's start (wall clock), journaled in the hook's state at its first call."""
    return float(ctx.state.setdefault("started", time.time()))


class Timeout:
    """Fail the run with ``StepTimeout`` once ``seconds`` have passed since it started."""

    name = "timeout"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def deadline(self, ctx: RunContext) -> float:
        return _started(ctx) + self.seconds

    def expired(self) -> StepTimeout:
        return StepTimeout(f"agent: deadline exceeded after {self.seconds:g}s")


class Recovery:
    """Turn an unexpected exception (Go's panic) into ``AgentError("agent panicked: …")``; errors
    shelly-dist raises on purpose pass through unchanged (cancellation is never seen by hooks)."""

    name = "recovery"

    async def on_run_error(self, ctx: RunContext, error: Exception) -> Exception:
        if isinstance(error, ShellyError):
            return error
        panicked = AgentError(f"agent panicked: {error}", agent=ctx.instance)
        panicked.__cause__ = error
        return panicked


class Logger:
    """Log "agent started" and "agent finished" (or "agent finished with error") with the duration."""

    name = "logger"

    def __init__(self, log: logging.Logger, agent: str) -> None:
        self.log = log
        self.agent = agent

    async def on_run_start(self, ctx: RunContext) -> None:
        _started(ctx)
        self.log.info("agent started agent=%s", self.agent)

    async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
        self.log.info("agent finished agent=%s duration=%.3fs", self.agent, time.time() - _started(ctx))
        return reply

    async def on_run_error(self, ctx: RunContext, error: Exception) -> Exception:
        self.log.error("agent finished with error agent=%s duration=%.3fs error=%s", self.agent,
                       time.time() - _started(ctx), error)
        return error


class OutputGuardrail:
    """Run ``check(reply)`` (sync or async) on the final reply; what it raises is the run's error."""

    name = "output_guardrail"

    def __init__(self, check: Callable[[Message], object]) -> None:
        self.check = check

    async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
        outcome = self.check(reply)
        if inspect.isawaitable(outcome):
            await outcome
        return reply


def timeout(seconds: float) -> Timeout:
    """A deadline ``seconds`` after the run's first step, across resumes (``StepTimeout``)."""
    return Timeout(seconds)


def recovery() -> Recovery:
    """Unexpected exceptions become ``AgentError("agent panicked: …")``."""
    return Recovery()


def logger(log: logging.Logger, name: str) -> Logger:
    """Log the run's start and end on ``log`` under agent ``name``."""
    return Logger(log, name)


@overload
def output_guardrail(check: str) -> Callable[[F], F]: ...
@overload
def output_guardrail(check: Callable[[Message], object]) -> OutputGuardrail: ...
def output_guardrail(check: str | Callable[[Message], object]) -> OutputGuardrail | Callable[[F], F]:
    """``output_guardrail(check)``: the hook running ``check(reply)`` on the final reply.
    ``@output_guardrail("name")``: register ``check(text, ctx)`` as the named guardrail agents list
    under ``guardrails: {output: [name]}`` (trips by raising ``GuardrailTripped``)."""
    if isinstance(check, str):
        return output_guardrail_named(check)
    return OutputGuardrail(check)
