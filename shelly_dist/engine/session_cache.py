"""A cache of per-session objects with an upper bound: least recently used first out, and anything
unused for a while out too.

A long-lived worker sees a new session per item of a distributed batch; anything it keeps per
session (agent registries, store handles) must be forgotten again or the worker only grows. What is
evicted here is only ever a handle that can be rebuilt from the config and Redis, so eviction
costs a rebuild, never state. Unbounded (``max_size=None, ttl=None``) it is a plain thread-safe
dict, which is what an embedded engine needs: its in-memory boards are the only copy.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SessionCache(Generic[T]):
    """Values by session id, at most ``max_size`` of them, none unused for more than ``ttl`` s."""

    def __init__(
        self, *, max_size: int | None = None, ttl: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_size = max_size
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[T, float]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, session: object) -> bool:
        with self._lock:
            return session in self._items

    def lookup(self, session: str) -> T | None:
        """The value of ``session`` if held (marked used now), else ``None``: for a caller that must
        do async work before it can build one."""
        now = self._clock()
        with self._lock:
            found = self._items.get(session)
            if found is None:
                return None
            self._items[session] = (found[0], now)
            self._items.move_to_end(session)
            self._evict(now)
            return found[0]

    def get(self, session: str, build: Callable[[], T]) -> T:
        """The value of ``session``, built (outside the lock) on a miss; marks it used now."""
        found = self.lookup(session)
        if found is not None:
            return found
        value = build()
        now = self._clock()
        with self._lock:
            current = self._items.get(session)
            if current is not None:  # built meanwhile by another thread: keep the first
                value = current[0]
            self._items[session] = (value, now)
            self._items.move_to_end(session)
            self._evict(now)
            return value

    def discard(self, session: str) -> None:
        """Forget ``session`` now (its objects are no longer needed)."""
        with self._lock:
            self._items.pop(session, None)

    def set_limits(self, *, max_size: int | None, ttl: float | None) -> None:
        """Bound the cache from now on (and evict what is over the new bounds at once)."""
        with self._lock:
            self.max_size, self.ttl = max_size, ttl
            self._evict(self._clock())

    def _evict(self, now: float) -> None:
        # Oldest use first: stop at the first entry that is recent enough.
        if self.ttl is not None:
            while self._items:
                _, used = next(iter(self._items.values()))
                if now - used <= self.ttl:
                    break
                self._items.popitem(last=False)
        if self.max_size is not None:
            while len(self._items) > self.max_size:
                self._items.popitem(last=False)
