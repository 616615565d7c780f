"""A named, ordered set of tools.

Insertion order is kept; registering an existing name replaces the tool in place (Shelly's
``Register``). ``filter`` follows Shelly exactly: ``None`` → the same toolbox, ``[]`` → an empty
one, otherwise the requested tools in the requested order with unknown names skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from shelly_dist.tools.tool import Tool


class ToolBox:
    """Tools by name, in insertion order."""

    def __init__(self, tools: Iterable[Tool] = (), *, name: str = "") -> None:
        self.name = name
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, *tools: Tool) -> None:
        """Add tools; a tool whose name exists replaces the old one where it stood."""
        for t in tools:
            self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def filter(self, names: list[str] | None) -> ToolBox:
        """Shelly's ``Filter``: ``None`` keeps this toolbox, otherwise a new one in ``names`` order."""
        if names is None:
            return self
        return ToolBox((self._tools[n] for n in names if n in self._tools), name=self.name)

    def merge(self, *others: ToolBox) -> ToolBox:
        """A new toolbox with this one's tools, then the others' (later names replace earlier)."""
        merged = ToolBox(self._tools.values(), name=self.name)
        for other in others:
            merged.register(*other.tools())
        return merged

    def __repr__(self) -> str:
        return f"ToolBox(name={self.name!r}, tools={self.names()!r})"
