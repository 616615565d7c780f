"""A tool hook that notices an agent repeating the same call and stops a stuck run.

Two calls are the same when the tool name and the canonical JSON of the arguments (keys sorted,
no whitespace) are equal, so ``{"a":1,"b":2}`` and ``{ "b": 2, "a": 1 }`` count together. Counts
are over the whole run, not only consecutive calls, so an A-B-A-B cycle is caught too. From the
``warn_after``-th identical call on, the result the model sees carries a warning; a call beyond
``stop_after`` raises :class:`~shelly_dist.errors.LoopDetected` before the tool runs, which stops
the run. Counts are the run's: inside a run they live in its journaled state
(:func:`~shelly_dist.tools.hooks.run_memory`), so a run continued on another worker or after a
suspension keeps counting; outside a run (a detector used on its own) the detector keeps them.
"""

from __future__ import annotations

import json

from shelly_dist import identity
from shelly_dist.chats import ToolCall, ToolResult
from shelly_dist.errors import LoopDetected, UsageError
from shelly_dist.tools.hooks import run_memory

DEFAULT_WARN_AFTER = 3
DEFAULT_STOP_AFTER = 6
MEMORY = "loop_detect"
"""The detector's name in the run's hook memory (journaled with the run's state)."""


def call_key(call: ToolCall) -> str:
    """The tool name and its arguments in canonical JSON (raw text when not valid JSON)."""
    try:
        args = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except ValueError:
        args = call.arguments
    return f"{call.name}\0{args}"


class LoopDetector:
    """A :class:`~shelly_dist.tools.hooks.ToolHook` counting identical calls in one run."""

    def __init__(self, *, warn_after: int | None = None, stop_after: int | None = None) -> None:
        """``None`` takes the default, so config's ``loop_detection`` fields pass straight in."""
        warn_after = DEFAULT_WARN_AFTER if warn_after is None else warn_after
        stop_after = max(DEFAULT_STOP_AFTER, warn_after) if stop_after is None else stop_after
        if warn_after < 1 or stop_after < warn_after:
            raise UsageError(f"loop detector: need 1 <= warn_after <= stop_after, got {warn_after}, {stop_after}")
        self.warn_after = warn_after
        self.stop_after = stop_after
        self._counts: dict[str, int] = {}
        self._seen: dict[str, int] = {}

    async def before_tool(self, call: ToolCall) -> ToolResult | None:
        key = call_key(call)
        counts = run_memory(MEMORY)
        if counts is None:
            counts = self._counts
        count = counts[key] = counts.get(key, 0) + 1
        if count > self.stop_after:
            raise LoopDetected(
                f"loop detected: {call.name} called {count} times with the same arguments (limit {self.stop_after})",
                agent=identity.agent_name(),
            )
        self._seen[call.id] = count
        return None

    async def after_tool(self, call: ToolCall, result: ToolResult) -> ToolResult:
        count = self._seen.pop(call.id, 0)
        if count < self.warn_after:
            return result
        warning = (
            f"\n\n[warning: you have called {call.name} {count} times with the same arguments; "
            f"the run stops after {self.stop_after}. Try a different approach.]"
        )
        return result.model_copy(update={"content": result.content + warning})
