"""Reading a Server-Sent Events answer in tests (the console's streams): messages as (id, data)."""

from __future__ import annotations

import asyncio
import json
from typing import Any


async def read_sse(response: Any, until: Any, timeout: float = 30) -> list[tuple[str, dict[str, Any]]]:  # noqa: ASYNC109
    """``(id, event)`` messages of ``response`` until ``until(messages)`` is true (or fail after
    ``timeout`` seconds naming what came)."""
    messages: list[tuple[str, dict[str, Any]]] = []
    event_id, data = "", ""

    async def read() -> None:
        nonlocal event_id, data
        while not until(messages):
            line = (await response.content.readline()).decode()
            if not line:
                raise AssertionError(f"the stream ended after {len(messages)} messages")
            line = line.rstrip("\n")
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and data:
                messages.append((event_id, json.loads(data)))
                event_id, data = "", ""

    try:
        await asyncio.wait_for(read(), timeout)
    except TimeoutError as exc:
        raise AssertionError(f"timed out; got {[m[1]['kind'] for m in messages]}") from exc
    return messages
