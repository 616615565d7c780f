"""Middleware around an agent's run: ``timeout``, ``recovery``, ``logger``, ``output_guardrail``.

A middleware takes the next runner and returns a runner; the first one listed in
``AgentOptions.middleware`` is the outermost, as in Shelly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from shelly_dist.chats import Message
from shelly_dist.errors import AgentError, ShellyError, StepTimeout

Runner = Callable[[], Awaitable[Message]]
Middleware = Callable[[Runner], Runner]


def compose(middleware: list[Middleware], runner: Runner) -> Runner:
    """Wrap ``runner`` so that ``middleware[0]`` runs first."""
    for mw in reversed(middleware):
        runner = mw(runner)
    return runner


def timeout(seconds: float) -> Middleware:
    """Fail the run with ``StepTimeout`` once ``seconds`` have passed (deadline exceeded)."""

    def wrap(next_: Runner) -> Runner:
        async def run() -> Message:
            deadline = asyncio.timeout(seconds)
            try:
                async with deadline:
                    return await next_()
            except TimeoutError as exc:
                if not deadline.expired():  # the runner's own TimeoutError, not our deadline
                    raise
                raise StepTimeout(f"agent: deadline exceeded after {seconds:g}s") from exc

        return run

    return wrap


def recovery() -> Middleware:
    """Turn an unexpected exception (Go's panic) into ``AgentError("agent panicked: …")``.

    Errors shelly-dist raises on purpose and cancellation pass through unchanged.
    """

    def wrap(next_: Runner) -> Runner:
        async def run() -> Message:
            try:
                return await next_()
            except ShellyError:
                raise
            except Exception as exc:
                raise AgentError(f"agent panicked: {exc}") from exc

        return run

    return wrap


def logger(log: logging.Logger, name: str) -> Middleware:
    """Log "agent started" and "agent finished" (or "agent finished with error") with the duration."""

    def wrap(next_: Runner) -> Runner:
        async def run() -> Message:
            start = time.monotonic()
            log.info("agent started agent=%s", name)
            try:
                reply = await next_()
            except BaseException as exc:
                log.error(
                    "agent finished with error agent=%s duration=%.3fs error=%s", name, time.monotonic() - start, exc
                )
                raise
            log.info("agent finished agent=%s duration=%.3fs", name, time.monotonic() - start)
            return reply

        return run

    return wrap


Check = Callable[[Message], "Awaitable[None] | None"]


def output_guardrail(check: Callable[[Message], object]) -> Middleware:
    """Run ``check`` on the final reply; an exception it raises becomes the run's error.

    Skipped when the inner runner already failed.
    """

    def wrap(next_: Runner) -> Runner:
        async def run() -> Message:
            reply = await next_()
            outcome = check(reply)
            if asyncio.iscoroutine(outcome):
                await outcome
            return reply

        return run

    return wrap
