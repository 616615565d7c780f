"""Small builders for agent tests: scripted replies and a registry of scripted agents."""

from __future__ import annotations

import json
from typing import Any

from shelly_dist import ScriptedCompleter
from shelly_dist.agent import Agent, AgentOptions, Registry
from shelly_dist.tools import Tool, ToolBox


def call(name: str, args: dict[str, Any] | None = None, *, id: str | None = None) -> dict[str, Any]:
    """A scripted reply holding one tool call."""
    tc: dict[str, Any] = {"name": name, "arguments": args or {}}
    if id:
        tc["id"] = id
    return {"tool_calls": [tc]}


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A scripted reply holding several tool calls, in order."""
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]}


def delegate(*tasks: dict[str, Any]) -> dict[str, Any]:
    return call("delegate", {"tasks": [{"context": "", **t} for t in tasks]})


def complete(summary: str, status: str = "completed", **extra: Any) -> dict[str, Any]:
    return call("task_complete", {"status": status, "summary": summary, **extra})


def echo_toolbox(name: str = "tools") -> ToolBox:
    async def echo(arguments: str) -> str:
        return json.loads(arguments or "{}").get("text", "")

    async def boom(arguments: str) -> str:
        raise RuntimeError("boom")

    return ToolBox(
        [
            Tool("echo", "echo text", {"type": "object", "properties": {"text": {"type": "string"}}}, echo),
            Tool("boom", "always fails", {"type": "object"}, boom),
        ],
        name=name,
    )


class Team:
    """A registry of scripted agents; ``completers[name]`` is the last one built for ``name``."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.completers: dict[str, list[ScriptedCompleter]] = {}

    def add(
        self,
        name: str,
        replies: list[Any],
        *,
        description: str = "",
        toolboxes: tuple[ToolBox, ...] = (),
        repeat_last: bool = False,
        **options: Any,
    ) -> None:
        def factory() -> Agent:
            completer = ScriptedCompleter(replies, repeat_last=repeat_last, name=name)
            self.completers.setdefault(name, []).append(completer)
            agent = Agent(name, description or f"the {name}", completer=completer, options=AgentOptions(**options))
            agent.add_toolboxes(*toolboxes)
            return agent

        entry_fields = {k: options.pop(k) for k in ("max_concurrency",) if k in options}
        self.registry.register(name, description or f"the {name}", factory, **entry_fields)

    def spawn(self, name: str, depth: int = 0) -> Agent:
        return self.registry.spawn(name, depth)

    def requests(self, name: str) -> list[Any]:
        return [r for c in self.completers.get(name, []) for r in c.requests]
