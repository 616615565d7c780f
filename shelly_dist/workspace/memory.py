"""The in-process workspace: the embedded runtime's, and the reference for the contract.

Every primitive does its work without awaiting in between, so on one event loop each is atomic
without a lock.
"""

from __future__ import annotations

import time
from typing import Any

from shelly_dist.workspace.base import TextRule, WorkspaceBase
from shelly_dist.workspace.models import ChannelMessage


class MemoryWorkspace(WorkspaceBase):
    """A team workspace in this process. Use it from one event loop."""

    def __init__(self) -> None:
        super().__init__()
        self._channel: list[str] = []
        self._cursors: dict[str, int] = {}
        self._tables: dict[str, dict[str, str]] = {}
        self._wakes: dict[str, tuple[str, float]] = {}

    async def _append(self, fields: dict[str, Any]) -> ChannelMessage:
        message = ChannelMessage.model_validate({"id": len(self._channel) + 1, "timestamp": time.time(), **fields})
        self._channel.append(message.model_dump_json(by_alias=True))
        return message

    async def _after(self, after: int) -> list[ChannelMessage]:
        return [ChannelMessage.model_validate_json(raw) for raw in self._channel[max(after, 0):]]

    async def cursor(self, agent: str) -> int:
        return self._cursors.get(agent, 0)

    async def _ack(self, agent: str, until: int) -> int:
        cursor = max(self._cursors.get(agent, 0), min(until, len(self._channel)))
        self._cursors[agent] = cursor
        return cursor

    def _table(self, table: str) -> dict[str, str]:
        return self._tables.setdefault(table, {})

    async def _get(self, table: str, field: str) -> str | None:
        return self._table(table).get(field)

    async def _all(self, table: str) -> dict[str, str]:
        return dict(self._table(table))

    async def _put(self, table: str, field: str, text: str, *, only_new: bool = False) -> bool:
        if only_new and field in self._table(table):
            return False
        self._table(table)[field] = text
        return True

    async def _mutate(self, table: str, field: str, rule: TextRule) -> str:
        text = rule(self._table(table).get(field))
        self._table(table)[field] = text
        return text

    async def _delete(self, table: str, field: str) -> bool:
        return self._table(table).pop(field, None) is not None

    async def acquire_wake(self, agent: str, token: str, ttl: float) -> bool:
        held = self._wakes.get(agent)
        if held is not None and held[0] != token and held[1] > time.monotonic():
            return False
        self._wakes[agent] = (token, time.monotonic() + ttl)
        return True

    async def renew_wake(self, agent: str, token: str, ttl: float) -> bool:
        held = self._wakes.get(agent)
        if held is None or held[0] != token:
            return False
        self._wakes[agent] = (token, time.monotonic() + ttl)
        return True

    async def release_wake(self, agent: str, token: str) -> None:
        if self._wakes.get(agent, ("", 0.0))[0] == token:
            del self._wakes[agent]

    async def wake_lease_left(self, agent: str) -> float:
        held = self._wakes.get(agent)
        return 0.0 if held is None else max(held[1] - time.monotonic(), 0.0)
