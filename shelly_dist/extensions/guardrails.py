"""Guardrails as hooks: an input guardrail checks the task when the run starts, an output guardrail
the final reply's text when it ends; both before anything is journaled as done.

A check trips by raising :class:`~shelly_dist.errors.GuardrailTripped`; the run then fails with
``guardrail <name> tripped: <reason>``. Any other exception is a failure of the guardrail itself,
``guardrail <name> failed: <error>``, so a bug in a check is never mistaken for a verdict.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

from shelly_dist.chats import Message
from shelly_dist.errors import GuardrailError, GuardrailTripped
from shelly_dist.extensions.context import RunContext

Check = Callable[[str, RunContext], Any]
"""``check(text, ctx) -> None``, sync or async."""


class GuardrailHook:
    """The hook that runs one guardrail ``check`` on the task (``input``) or the reply (``output``)."""

    def __init__(self, name: str, check: Check, side: Literal["input", "output"]) -> None:
        self.name = name
        self.check = check
        self.side = side

    async def _verdict(self, text: str, ctx: RunContext) -> None:
        try:
            outcome = self.check(text, ctx)
            if inspect.isawaitable(outcome):
                await outcome
        except GuardrailTripped as exc:
            raise GuardrailError(f"guardrail {self.name} tripped: {exc}", agent=ctx.instance,
                                 guardrail=self.name) from exc
        except Exception as exc:
            raise GuardrailError(f"guardrail {self.name} failed: {type(exc).__name__}: {exc}", agent=ctx.instance,
                                 guardrail=self.name) from exc

    async def on_run_start(self, ctx: RunContext) -> None:
        if self.side == "input":
            await self._verdict(ctx.task, ctx)

    async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
        if self.side == "output":
            await self._verdict(reply.text_content(), ctx)
        return reply

    def __repr__(self) -> str:
        return f"GuardrailHook({self.name!r}, {self.side})"
