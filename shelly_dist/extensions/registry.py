"""The process-wide registry the decorators fill and the engine reads by name.

Names are what a config refers to: a toolbox (``toolboxes: [orders]``), a hook (``hooks:
[audit]``), a guardrail (``guardrails: {input: [no_pii]}``), a provider kind (``kind: gateway``).
Each entry remembers the module that registered it, so an error can say where a name comes from,
and ``shelly agents --check`` can say which Python tools an agent gets.

Registering a name again from the same function (a module imported twice, reloaded) replaces the
entry; two different functions claiming one name is a mistake reported at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shelly_dist.errors import UsageError
from shelly_dist.tools import Tool, ToolBox


@dataclass(frozen=True)
class Entry:
    """One registered piece: its name, the object and where it was defined."""

    name: str
    obj: Any
    module: str
    qualname: str

    def origin(self) -> str:
        return f"{self.module}.{self.qualname}"


def entry_of(name: str, obj: Any) -> Entry:
    return Entry(name, obj, getattr(obj, "__module__", "") or "", getattr(obj, "__qualname__", repr(obj)))


@dataclass
class Extensions:
    """Every registered tool (by toolbox), hook, guardrail and provider kind."""

    toolboxes: dict[str, dict[str, tuple[Entry, Tool]]] = field(default_factory=dict)
    hooks: dict[str, Entry] = field(default_factory=dict)
    input_guardrails: dict[str, Entry] = field(default_factory=dict)
    output_guardrails: dict[str, Entry] = field(default_factory=dict)
    providers: dict[str, Entry] = field(default_factory=dict)

    def add_tool(self, toolbox: str, fn: Callable[..., Any], tool: Tool) -> None:
        box = self.toolboxes.setdefault(toolbox, {})
        self._claim(f"tool {tool.name!r} in toolbox {toolbox!r}",
                    {k: e for k, (e, _) in box.items()}, entry_of(tool.name, fn))
        box[tool.name] = (entry_of(tool.name, fn), tool)

    def add(self, kind: str, table: dict[str, Entry], name: str, obj: Any) -> None:
        self._claim(f"{kind} {name!r}", table, entry_of(name, obj))
        table[name] = entry_of(name, obj)

    @staticmethod
    def _claim(what: str, table: dict[str, Entry], new: Entry) -> None:
        have = table.get(new.name)
        if have is not None and have.origin() != new.origin():
            raise UsageError(f"{what} is registered twice: by {have.origin()} and by {new.origin()}")

    def toolbox(self, name: str) -> ToolBox:
        """The Python toolbox ``name`` (its tools in registration order)."""
        return ToolBox([tool for _, tool in self.toolboxes.get(name, {}).values()], name=name)

    def tool_origins(self, toolbox: str) -> dict[str, str]:
        """Each tool of ``toolbox`` by name → the function it calls (``module.qualname``)."""
        return {name: e.origin() for name, (e, _) in self.toolboxes.get(toolbox, {}).items()}


REGISTRY = Extensions()
"""The registry of this process: what every module named by ``python:`` registered on import."""
