"""The ``<blackboard>`` section an agent may carry in its system prompt (``blackboard_in_prompt``).

The section is a snapshot taken when the prompt is built, one ``key: json`` line per key in key
order, and is size-capped: a busy blackboard must never crowd the task out of the context window,
so past the cap the text is cut and a visible marker tells the model to read keys with the tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shelly_dist.state.base import Store

DEFAULT_LIMIT_CHARS = 4000


def blackboard_section(snapshot: Mapping[str, Any], limit_chars: int = DEFAULT_LIMIT_CHARS) -> str:
    """``<blackboard>…</blackboard>`` for ``snapshot``; ``""`` when it is empty."""
    if not snapshot:
        return ""
    body = "\n".join(
        f"{key}: {json.dumps(snapshot[key], separators=(',', ':'), ensure_ascii=False)}" for key in sorted(snapshot)
    )
    if len(body) > limit_chars:
        omitted = len(body) - limit_chars
        body = (
            body[:limit_chars]
            + f"\n[… blackboard truncated: {omitted} more characters; use shared_state_get to read keys]"
        )
    return f"<blackboard>\n{body}\n</blackboard>"


async def blackboard_prompt(store: Store, limit_chars: int = DEFAULT_LIMIT_CHARS) -> str:
    """:func:`blackboard_section` of the store's current snapshot."""
    return blackboard_section(await store.snapshot(), limit_chars)
