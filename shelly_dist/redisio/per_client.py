"""One object per Redis client, made on first use and kept as long as the client lives.

Scripts are registered once per client (``runtime/celery/journal/registry.py``) and a loop turn's
pipeline is shared per client (``runtime/celery/journal/turn_batch.py``): both need "the one X of this
client" without holding the client alive, which is what :class:`PerClient` keeps.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerClient(Generic[T]):
    """``per_client(client)``: the one ``factory(client)`` of ``client`` (the same object every time)."""

    def __init__(self, factory: Callable[[Any], T]) -> None:
        self._factory = factory
        self._made: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()

    def __call__(self, client: Any) -> T:
        found = self._made.get(client)
        if found is None:
            found = self._made[client] = self._factory(client)
        return found
