"""Calling an agent's hooks from the step machine (:mod:`shelly_dist.agent.run`).

Every hook point is called by ``Run.step`` itself, never around it, so a run that is many Celery
tasks on many workers meets the same points as one run in one process: ``on_run_start`` once (a
journaled flag), ``before_model``/``after_model`` around each model call, ``before_tool``/
``after_tool`` around each tool call, ``on_run_end`` on the final reply before the run is journaled
as done, ``on_run_error`` when a step fails, and each hook's ``deadline`` bounding every step.
A hook's memory is its slot of ``RunState.hooks`` (by hook name), journaled with the run.

A hook that raises a shelly-dist error fails the run with that error; any other exception fails it
with ``hook <name> failed: <error>``. Cancellation always propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from shelly_dist.agent.agent import Agent
from shelly_dist.agent.records import RunState
from shelly_dist.chats import Message, Role, ToolCall, ToolResult
from shelly_dist.errors import HookError, ShellyError, StepTimeout, UsageError
from shelly_dist.extensions import HOOK_POINTS, RunContext


class Run(Protocol):
    """What the hook chain reads of a run (:class:`~.run.Run` is one): its agent and its journaled
    state. A protocol, so this module does not import the step machine that calls it."""

    agent: Agent
    state: RunState


def hook_name(hook: object) -> str:
    """The name a hook's memory is kept under and its errors show: its ``name``, else its class."""
    return str(getattr(hook, "name", "") or getattr(hook, "__name__", "") or type(hook).__name__)


class HookChain:
    """The hooks of one run, in the order the agent lists them. It holds no reference to the run
    (each point is given it), so a finished run is freed at once, not by the cycle collector."""

    def __init__(self, hooks: Sequence[object]) -> None:
        for hook in hooks:
            if not any(callable(getattr(hook, point, None)) for point in HOOK_POINTS):
                raise UsageError(
                    f"hook {hook_name(hook)}: has none of the hook points ({', '.join(HOOK_POINTS)}); a "
                    "middleware function wrapping a runner is no longer supported: write a hook class"
                )
        self.hooks = list(hooks)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    @staticmethod
    def context(run: Run, hook: object, *, task: str = "") -> RunContext:
        name = hook_name(hook)
        return RunContext(
            agent=run.agent.config_name, run_id=run.state.run_id, depth=run.agent.depth,
            session=run.agent.options.session, instance=run.agent.name, task=task,
            state=run.state.hooks.setdefault(name, {}),
        )

    async def _call(self, run: Run, hook: object, point: str, *args: object, task: str = "") -> Any:
        method = getattr(hook, point, None)
        if method is None:
            return None
        ctx = self.context(run, hook, task=task)
        try:
            out = await method(ctx, *args)
            if ctx.state:  # the pool journals it as JSON: fail the same way embedded, at once
                json.dumps(ctx.state)
            return out
        except ShellyError:
            raise
        except Exception as exc:
            raise HookError(f"hook {hook_name(hook)} failed: {type(exc).__name__}: {exc}",
                            agent=run.agent.name, hook=hook_name(hook)) from exc

    # -- the points ---------------------------------------------------------------------------

    async def run_start(self, run: Run) -> None:
        """``on_run_start`` of every hook (input guardrails included), once per run."""
        task = _task_text(run.agent.chat.view())
        for hook in self.hooks:
            await self._call(run, hook, "on_run_start", task=task)

    async def before_model(self, run: Run) -> None:
        for hook in self.hooks:
            await self._call(run, hook, "before_model", run.agent.chat)

    async def after_model(self, run: Run, reply: Message) -> Message:
        for hook in self.hooks:
            changed = await self._call(run, hook, "after_model", reply)
            if isinstance(changed, Message):
                reply = changed
        return reply

    async def before_tool(self, run: Run, call: ToolCall) -> ToolResult | None:
        for hook in self.hooks:
            answer = await self._call(run, hook, "before_tool", call)
            if isinstance(answer, ToolResult):
                return answer
        return None

    async def after_tool(self, run: Run, call: ToolCall, result: ToolResult) -> ToolResult:
        for hook in self.hooks:
            changed = await self._call(run, hook, "after_tool", call, result)
            if isinstance(changed, ToolResult):
                result = changed
        return result

    async def run_end(self, run: Run, reply: Message) -> Message:
        for hook in self.hooks:
            changed = await self._call(run, hook, "on_run_end", reply)
            if isinstance(changed, Message):
                reply = changed
        return reply

    async def run_error(self, run: Run, error: Exception) -> Exception:
        """The error the failing run raises after every ``on_run_error`` had its say."""
        for hook in self.hooks:
            method = getattr(hook, "on_run_error", None)
            if method is not None:
                changed = await method(self.context(run, hook), error)
                if isinstance(changed, Exception):
                    error = changed
        return error

    @contextlib.asynccontextmanager
    async def deadline(self, run: Run) -> AsyncIterator[None]:
        """Bound the step by the earliest ``deadline`` of any hook (wall clock, so it holds across
        workers and resumes); at that instant the step is interrupted with ``StepTimeout``."""
        bounds = [(d, hook) for hook in self.hooks if (d := _deadline(hook, run)) is not None]
        if not bounds:
            yield
            return
        at, hook = min(bounds, key=lambda b: b[0])
        left = at - time.time()
        if left <= 0:  # passed already (a resume after the deadline): not even one phase more
            raise _expired(hook)
        scope = asyncio.timeout(left)
        try:
            async with scope:
                yield
        except TimeoutError as exc:
            if not scope.expired():  # the step's own TimeoutError, not our deadline
                raise
            raise _expired(hook) from exc


def _expired(hook: object) -> Exception:
    expired = getattr(hook, "expired", None)
    return expired() if expired is not None else StepTimeout(f"hook {hook_name(hook)}: deadline exceeded")


def _deadline(hook: object, run: Run) -> float | None:
    method = getattr(hook, "deadline", None)
    return None if method is None else method(HookChain.context(run, hook))


def _task_text(messages: Sequence[Message]) -> str:
    """The run's task: the last user message when it starts."""
    for message in reversed(messages):
        if message.role == Role.USER:
            return message.text_content()
    return ""
