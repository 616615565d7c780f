"""The in-process blackboard: the embedded runtime's store, and the reference for the contract.

Every method does its work without awaiting in between, so on one event loop each call is atomic
without a lock. Values are kept as JSON text, which is what makes reads and writes copies.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

from shelly_dist.identity import agent_name
from shelly_dist.state.base import Entry, StoreBase, check_key, dump_value
from shelly_dist.state.changes import Changes, Signal


class MemoryStore(StoreBase):
    """A blackboard in this process. Use it from one event loop."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[str, str, float, int]] = {}
        self._signal = Signal()

    def _entry(self, key: str) -> Entry | None:
        row = self._data.get(key)
        if row is None:
            return None
        text, author, updated_at, version = row
        return Entry(value=json.loads(text), author=author, updated_at=updated_at, version=version)

    def _write(self, key: str, value: Any) -> Entry:
        text = dump_value(self.origin, check_key(self.origin, key), value)
        version = self._data[key][3] + 1 if key in self._data else 1
        self._data[key] = (text, agent_name(), time.time(), version)
        self._signal.notify()
        entry = self._entry(key)
        assert entry is not None
        return entry

    async def get(self, key: str) -> Entry | None:
        return self._entry(key)

    async def set(self, key: str, value: Any) -> Entry:
        return self._write(key, value)

    async def compare_and_set(self, key: str, value: Any, version: int) -> Entry | None:
        current = self._data[key][3] if key in self._data else 0
        if current != version:
            return None
        return self._write(key, value)

    async def delete(self, key: str) -> bool:
        if self._data.pop(key, None) is None:
            return False
        self._signal.notify()
        return True

    async def keys(self) -> list[str]:
        return sorted(self._data)

    async def entries(self) -> dict[str, Entry]:
        return {key: entry for key in sorted(self._data) if (entry := self._entry(key)) is not None}

    def changes(self) -> AbstractAsyncContextManager[Changes]:
        return self._signal.listen()
