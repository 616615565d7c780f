"""Which tools an agent may see: per-agent allow/deny lists, depth rules and the leaf rule.

Patterns, in ``allow``, ``deny`` and ``deny_at_depth``:

- a tool name (``fs_write``) or an fnmatch glob over names (``fs_*``, ``shared_state_*``);
- ``group:<g>`` matches ``Tool.group`` (``fs``, ``exec``, ``git``, ``web``, ``notes``, ``state``,
  ``tasks``, ``agents``, ``mcp:<server>``); a glob works here too (``group:mcp:*``), and
  ``group:mcp`` matches every MCP server's tools.

Order: ``allow`` (``None`` = everything) keeps the tools matching any pattern; then ``deny``
removes matches (deny wins over allow); then every ``deny_at_depth`` entry whose depth is <= the
agent's depth removes its matches. In YAML::

    tools:
      allow: [group:fs, group:git, exec_run]
      deny: [git_commit]
      deny_at_depth:
        1: [group:exec]      # sub-agents (depth >= 1) lose exec
        2: [group:web]       # depth >= 2 also lose http

The engine's ``AgentConfig.tools`` section has exactly this shape:
``ToolPolicy(cfg.allow, cfg.deny, cfg.deny_at_depth)``. A leaf agent (one that may not delegate)
also loses :data:`DELEGATION_TOOLS`; it keeps ``task_complete``, which a child needs to report back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

from shelly_dist.tools.tool import Tool

DELEGATION_TOOLS = frozenset({"delegate", "list_agents", "spawn", "spawn_status", "spawn_cancel"})


def matches(tool: Tool, pattern: str) -> bool:
    """Whether ``pattern`` (name, glob, ``group:<g>``) selects ``tool``."""
    if pattern.startswith("group:"):
        wanted = pattern.removeprefix("group:")
        group = tool.group
        return bool(group) and (fnmatchcase(group, wanted) or (wanted == "mcp" and group.startswith("mcp:")))
    return fnmatchcase(tool.name, pattern)


def _any(tool: Tool, patterns: Iterable[str]) -> bool:
    return any(matches(tool, p) for p in patterns)


class ToolPolicy:
    """An agent's tool rules; immutable once built, safe to share between runs."""

    def __init__(
        self,
        allow: list[str] | None = None,
        deny: Iterable[str] = (),
        deny_at_depth: Mapping[int | str, Iterable[str]] | None = None,
    ) -> None:
        self.allow = None if allow is None else list(allow)
        self.deny = list(deny)
        self.deny_at_depth = {int(k): list(v) for k, v in (deny_at_depth or {}).items()}

    def denied_at(self, depth: int) -> list[str]:
        """Every deny pattern in force at ``depth``."""
        extra = [p for d, pats in sorted(self.deny_at_depth.items()) if depth >= d for p in pats]
        return self.deny + extra

    def apply(self, tools: list[Tool], depth: int, *, leaf: bool = False) -> list[Tool]:
        """The tools this agent sees at ``depth``, in their original order."""
        denied = self.denied_at(depth)
        return [
            t
            for t in tools
            if (self.allow is None or _any(t, self.allow))
            and not _any(t, denied)
            and not (leaf and t.name in DELEGATION_TOOLS)
        ]

    def __repr__(self) -> str:
        return f"ToolPolicy(allow={self.allow!r}, deny={self.deny!r}, deny_at_depth={self.deny_at_depth!r})"
