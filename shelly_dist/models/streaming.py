"""Streaming a reply to whoever watches: text deltas while the model writes.

A provider streams only when someone is there to read the deltas (DESIGN §13): a person at
``shelly``'s chat or ``shelly run``'s live view, an A2A client on ``message/stream``. Batch work
never streams. Two pieces of context say so, so the :class:`~shelly_dist.models.completer.Completer`
interface stays ``complete(chat, tools)`` and every wrapper (retry, throttle, fallback, pricing)
passes the stream through untouched:

- :func:`watching` marks a run tree as watched. The caller wraps the send in it; the run records
  it in its journaled state (``RunState.watched``) and hands it to its children, so a child on
  another worker streams too.
- :func:`streaming_to` gives the model call of one run a :class:`Deltas` to write to. The run sets
  it around its model call when it is watched; a provider that can stream (and whose config does
  not say ``stream: false``) asks the vendor for a stream and calls :meth:`Deltas.text` for each
  piece of text. The reply it returns is the whole reply, assembled from the stream exactly as
  the non-streamed answer would have been decoded: what the journal holds does not change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Deltas(Protocol):
    """Receives one model call's text as it is written. Must not block (it runs in the stream)."""

    def begin(self) -> None:
        """A streamed answer starts (again, after a retry or a fallback: text so far is void)."""

    def text(self, delta: str) -> None:
        """The next piece of the reply's text."""


_watched: ContextVar[bool] = ContextVar("shelly_watched", default=False)
_deltas: ContextVar[Deltas | None] = ContextVar("shelly_deltas", default=None)


def watched() -> bool:
    """Whether a run started in this context is watched by a person (see :func:`watching`)."""
    return _watched.get()


@contextmanager
def watching(on: bool = True) -> Iterator[None]:
    """Runs started inside the ``with`` are watched: their model calls stream (DESIGN §13)."""
    token = _watched.set(on)
    try:
        yield
    finally:
        _watched.reset(token)


def deltas() -> Deltas | None:
    """Where the model call in this context writes its text deltas (``None``: do not stream)."""
    return _deltas.get()


@contextmanager
def streaming_to(sink: Deltas | None) -> Iterator[None]:
    """The model call inside the ``with`` streams its text to ``sink`` (``None``: no stream)."""
    token = _deltas.set(sink)
    try:
        yield
    finally:
        _deltas.reset(token)
