"""The registry: which agents exist, how to build one, and how many have been spawned.

Registering an existing name replaces both factory and entry (Shelly). ``max_concurrency`` is
advertised in ``list_agents`` *and* enforced by the runtime (a deliberate difference from Shelly).
The spawn counter is per process; a distributed runtime supplies its own counter so instance names
stay unique across machines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shelly_dist.agent.entry import Entry
from shelly_dist.errors import AgentError

if TYPE_CHECKING:
    from shelly_dist.agent.agent import Agent

__all__ = ["Entry", "Factory", "Registry"]

Factory = Callable[[], "Agent"]
"""Builds a fresh agent instance: its completer, toolboxes and options."""


class Registry:
    """Agent factories by config name. Safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._factories: dict[str, Factory] = {}
        self._entries: dict[str, Entry] = {}
        self._counters: dict[str, int] = {}

    def register(self, name: str, description: str, factory: Factory, **entry_fields: Any) -> None:
        """Register (or replace) ``name``; extra keywords are :class:`Entry` fields."""
        self.register_entry(Entry(name=name, description=description, **entry_fields), factory)

    def register_entry(self, entry: Entry, factory: Factory) -> None:
        with self._lock:
            self._entries[entry.name] = entry
            self._factories[entry.name] = factory

    def get(self, name: str) -> Entry | None:
        """The entry for ``name``, or ``None`` when no such agent is registered."""
        with self._lock:
            return self._entries.get(name)

    def list(self) -> list[Entry]:
        """Every entry, sorted by name."""
        with self._lock:
            return [self._entries[k] for k in sorted(self._entries)]

    def spawn(self, name: str, depth: int = 0) -> Agent:
        """A new instance of ``name`` at ``depth``, wired to this registry.

        Raises ``AgentError`` when ``name`` is not registered.
        """
        with self._lock:
            factory = self._factories.get(name)
        if factory is None:
            raise AgentError(f'registry: agent "{name}" not found', agent=name)
        agent = factory()
        agent.depth = depth
        agent.config_name = name
        if agent.registry is None:
            agent.set_registry(self)
        return agent

    def next_id(self, name: str) -> int:
        """1, 2, 3… counted separately for each name."""
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + 1
            return self._counters[name]
