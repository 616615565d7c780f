"""The agent: identity, completer, toolboxes and options — and nothing about where it runs.

An agent has two names: ``name`` is the instance (``coder-refactor-1`` for a spawned child) and
``config_name`` is the registry key used for self-exclusion and the self-delegation check, always
compared case-insensitively. The loop itself lives in :mod:`shelly_dist.agent.run`; ``run()`` here
is the convenience that runs it to the end in this process (children wherever its delegator says).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from shelly_dist import identity
from shelly_dist.agent.entry import Entry
from shelly_dist.agent.options import AgentOptions
from shelly_dist.agent.prompt import PromptInputs, prompt_parts
from shelly_dist.chats import Chat, Message, Role
from shelly_dist.errors import UsageError
from shelly_dist.models import Completer, UsageTracker
from shelly_dist.observability import tracing
from shelly_dist.tools import ToolBox


class Roster(Protocol):
    """What an agent asks of the registry it belongs to (:class:`~.registry.Registry` is one):
    the agents it may name, and fresh instances of them."""

    def get(self, name: str) -> Entry | None: ...

    def list(self) -> list[Entry]: ...

    def spawn(self, name: str, depth: int = 0) -> Agent: ...

    def next_id(self, name: str) -> int: ...


class Runnable(Protocol):
    """A run of an agent (:class:`~.run.Run`), as :meth:`Agent.execute` drives it."""

    async def until_done(self) -> Message: ...

    async def close(self) -> None: ...


Driver = Callable[["Agent", Any], Awaitable[Message]]
"""Runs an agent's loop to its end in this process with a delegator (``None``: its own) — how
:meth:`Agent.run` works. The embedded runtime (:mod:`shelly_dist.runtime.local`) supplies it when
imported, so the agent imports no runtime: where children run is a runtime's decision, layer 8."""

_driver: Driver | None = None

DEFAULT_RUNTIME = "shelly_dist.runtime.local"
"""The runtime whose import supplies the driver when nothing has (:meth:`Agent.run` loads it by
name on first use). Importing ``shelly_dist`` once loaded it with everything else; since the
package imports on demand (STYLE lesson 21), ``from shelly_dist import Agent`` alone no longer does."""


def drive_with(driver: Driver) -> None:
    """Make ``driver`` the way :meth:`Agent.run` runs (the embedded runtime calls this)."""
    global _driver
    _driver = driver


class Agent:
    """An LLM agent. Build it directly, or through a :class:`Registry` factory."""

    def __init__(
        self,
        name: str,
        description: str = "",
        instructions: str = "",
        completer: Completer | None = None,
        options: AgentOptions | None = None,
    ) -> None:
        if completer is None:
            raise UsageError(f"agent {name!r}: a completer is required")
        self.name = name
        self.config_name = name
        self.description = description
        self.instructions = instructions
        self.completer = completer
        self.options = options or AgentOptions()
        self.depth = 0
        self.chat = Chat()
        self.registry: Roster | None = None
        self.usage = UsageTracker()
        self._toolboxes: list[ToolBox] = []

    @property
    def toolboxes(self) -> list[ToolBox]:
        return list(self._toolboxes)

    def add_toolboxes(self, *toolboxes: ToolBox) -> None:
        """Add toolboxes; the same toolbox object is only ever added once."""
        for box in toolboxes:
            if not any(box is have for have in self._toolboxes):
                self._toolboxes.append(box)

    def set_registry(self, registry: Roster) -> None:
        self.registry = registry

    def can_delegate(self) -> bool:
        """True while a registry is set and the depth is below ``max_delegation_depth``."""
        depth_limit = self.options.max_delegation_depth
        return self.registry is not None and depth_limit > 0 and self.depth < depth_limit

    def system_prompt(
        self, *, extra_sections: list[str] | None = None, has_notes: bool | None = None,
        interactive_delegation: bool | None = None,
    ) -> str:
        """The system prompt as it would be sent now (see :meth:`system_prompt_parts`)."""
        return "".join(self.system_prompt_parts(extra_sections=extra_sections, has_notes=has_notes,
                                                interactive_delegation=interactive_delegation))

    def system_prompt_parts(
        self, *, extra_sections: list[str] | None = None, has_notes: bool | None = None,
        interactive_delegation: bool | None = None,
    ) -> tuple[str, str]:
        """The system prompt as it would be sent now (``has_notes`` defaults to a ``list_notes`` tool
        being in one of the agent's toolboxes; ``interactive_delegation`` to
        ``interaction_mode: interactive``, as in Go, whether or not the agent can delegate now). The
        handoff and interaction protocols follow the conditions under which a run offers ``handoff``
        and ``request_input``. Two parts: what every instance of this agent shares, then this
        instance's own tail (:func:`~shelly_dist.agent.prompt.prompt_parts`)."""
        if has_notes is None:
            has_notes = any("list_notes" in box for box in self._toolboxes)
        can = self.can_delegate()
        if interactive_delegation is None:
            interactive_delegation = self.options.interaction_mode == "interactive"
        return prompt_parts(
            PromptInputs(
                name=self.name,
                config_name=self.config_name,
                description=self.description,
                instructions=self.instructions,
                depth=self.depth,
                can_delegate=can,
                agents=self.registry.list() if (can and self.registry is not None) else (),
                skills=self.options.skills,
                context=self.options.context,
                has_notes=has_notes,
                behavioral_hints=self.options.behavioral_hints,
                can_handoff=self.depth > 0 and self.registry is not None and self.options.max_handoffs > 0,
                has_interaction=self.depth > 0 and self.options.request_input is not None,
                interactive_delegation=interactive_delegation,
                extra_sections=extra_sections or [],
            )
        )

    async def run(self, prompt: str | None = None, *, delegator: Any = None) -> Message:
        """Run the loop to its end in this process and return the final reply.

        ``prompt`` (when given) is appended as a user message first. Children of ``delegate`` run
        where ``delegator`` (a :class:`~.run.Delegator`) says; by default as asyncio tasks in this
        process (the embedded runtime's).
        """
        if _driver is None:
            importlib.import_module(DEFAULT_RUNTIME)  # it registers its driver (drive_with)
        if _driver is None:
            raise UsageError(f"agent {self.name!r}: no runtime to run it (import {DEFAULT_RUNTIME})")
        if prompt is not None:
            self.chat.append(Message.text("user", Role.USER, prompt))
        return await _driver(self, delegator)

    async def execute(self, run: Runnable) -> Message:
        """Run ``run`` (a :class:`Run` of this agent) to its end (its hooks are called by its
        steps); however it ends, its interactive children still waiting are cancelled."""
        try:
            with tracing.invoke_agent(self.config_name or self.name, run.state.run_id, session=identity.session_id()):
                return await run.until_done()
        finally:
            await asyncio.shield(run.close())

    def run_sync(self, prompt: str | None = None) -> Message:
        """``asyncio.run(self.run(prompt))``. Not usable inside a running event loop or a tool."""
        return asyncio.run(self.run(prompt))

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, config_name={self.config_name!r}, depth={self.depth})"
