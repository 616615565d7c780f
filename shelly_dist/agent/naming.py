"""Instance names of spawned agents: ``<config>-<slug>-<n>``, as Shelly names them."""

from __future__ import annotations

import re

_STOP_WORDS = frozenset(
    "the and for with from that this into onto over some then than also just".split()
)
_EDGE = re.compile(r"^[\W_]+|[\W_]+$")
"""Non-alphanumeric edges, Unicode-aware: "Überprüfe" keeps its "ü"."""
_INNER = re.compile(r"[^\w-]")
"""Inner characters a name cannot hold: an instance name is @mentioned, shown and put in keys, and
``m1-team's-2`` broke all three (issue 38); ``re-run`` keeps its hyphen, as Shelly's does."""


def task_slug(task: str) -> str:
    """The first word of ≥3 characters (edges trimmed, stop-words skipped), at most 12 long."""
    for raw in task.lower().split():
        word = _INNER.sub("", _EDGE.sub("", raw))
        if len(word) >= 3 and word not in _STOP_WORDS:
            return word[:12]
    return "task"


def instance_name(config_name: str, task: str, n: int) -> str:
    """``coder-refactor-1`` for the first ``coder`` spawned on "Refactor the parser"."""
    return f"{config_name}-{task_slug(task)}-{n}"
