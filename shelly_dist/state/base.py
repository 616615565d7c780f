"""The blackboard contract: a per-session map from keys to JSON values, with versions and watch.

Every write records who made it (the running agent, from :mod:`shelly_dist.identity`), when, and a
per-key version that starts at 1 and increments on each write; deleting a key resets it, so
``compare_and_set(key, value, 0)`` means "create only if absent". Values are any JSON and are
copied on the way in and out (they travel as JSON text), so a caller mutating a value it passed or
got back never changes the store (Shelly behaviour 62).

:class:`StoreBase` holds the parts both implementations share: ``watch`` (subscribe, read, wait,
re-read — see :mod:`shelly_dist.state.changes`; a Redis outage under a watch is waited out, up to
its timeout, by :mod:`shelly_dist.redisio.blocking`) and ``snapshot``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from shelly_dist.errors import StoreError
from shelly_dist.redisio.blocking import read_through
from shelly_dist.state.changes import Changes, deadline_after, seconds_left


class Entry(BaseModel):
    """One blackboard value with its provenance. ``version`` starts at 1."""

    value: Any
    author: str = ""
    updated_at: float
    version: int


@runtime_checkable
class Store(Protocol):
    """The blackboard of one session."""

    async def get(self, key: str) -> Entry | None:
        """The entry at ``key``, or ``None``."""
        ...

    async def set(self, key: str, value: Any) -> Entry:
        """Write ``value`` (any JSON) as the running agent; returns the new entry. Wakes watchers."""
        ...

    async def compare_and_set(self, key: str, value: Any, version: int) -> Entry | None:
        """Write only if the key's current version is ``version`` (0: absent); ``None`` if not."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove ``key``; ``False`` (and no error) when it was missing."""
        ...

    async def keys(self) -> list[str]:
        """All keys, sorted."""
        ...

    async def entries(self) -> dict[str, Entry]:
        """Every entry, by key (sorted)."""
        ...

    async def snapshot(self) -> dict[str, Any]:
        """Every value, by key (sorted): a copy the caller may mutate."""
        ...

    async def watch(self, key: str, timeout: float | None = None) -> Entry:  # noqa: ASYNC109 - deadline is part of the contract
        """Return the entry as soon as ``key`` exists (at once if it does).

        Raises ``StoreError`` after ``timeout`` seconds (``None``: wait forever); cancelling the
        calling task cancels the watch.
        """
        ...


def dump_value(origin: str, key: str, value: Any) -> str:
    """``value`` as compact JSON text; non-JSON values raise ``StoreError`` naming the key."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{origin}: value for key {key!r} is not JSON: {exc}", key=key) from exc


def check_key(origin: str, key: str) -> str:
    if not isinstance(key, str) or not key:
        raise StoreError(f"{origin}: key must be a non-empty string", key=key or None)
    return key


class StoreBase(ABC):
    """``watch`` and ``snapshot`` over an implementation's ``get``/``entries``/``changes``."""

    origin = "state"

    @abstractmethod
    async def get(self, key: str) -> Entry | None: ...

    @abstractmethod
    async def entries(self) -> dict[str, Entry]: ...

    @abstractmethod
    def changes(self) -> AbstractAsyncContextManager[Changes]:
        """A subscription to write hints (entered before the first read of a watch)."""

    async def snapshot(self) -> dict[str, Any]:
        return {key: entry.value for key, entry in (await self.entries()).items()}

    async def watch(self, key: str, timeout: float | None = None) -> Entry:  # noqa: ASYNC109 - deadline is part of the contract
        check_key(self.origin, key)
        deadline = deadline_after(timeout)
        async with self.changes() as changes:
            while True:
                entry = await read_through(self.origin, lambda: self.get(key), until=deadline)
                if entry is not None:
                    return entry
                left = seconds_left(deadline)
                if left == 0.0:
                    raise StoreError(f"{self.origin}: timed out after {timeout:g}s waiting for key {key!r}", key=key)
                await changes.wait(left)
