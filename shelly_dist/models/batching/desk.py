"""A provider key's batch desk: the requests waiting to be sent, the flushes (one vendor batch
each) and every request's state — what :mod:`.work` reads and journals, kept in memory in one
process (:class:`MemoryDesk`) or in Redis on a pool (``runtime/celery/children/batch_desk.py``).

A request's state is ``window`` (not sent yet), ``flush:<id>`` (in that flush), ``reply`` (its
reply came and is kept, not yet delivered), ``fallback:<reason>`` (to be called directly), ``done``
(delivered) or ``canceled``; once its flush is over it is forgotten (``forget``). A flush's record
(:class:`Flush`) says how far its vendor batch got: ``open``, ``uploaded``, ``creating`` (its
create sent, its answer not yet recorded), ``polling``, ``ended`` (its results read, its requests
being delivered).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from shelly_dist.chats import Message
from shelly_dist.events import Event
from shelly_dist.models.batching.api import BatchAPI, BatchSettings
from shelly_dist.models.completer import Completer, ToolSpec

Asked = tuple[list[Message], list[ToolSpec]]
"""What a request asks: the chat's messages and the tools offered."""

StateChange = tuple[str, str, str]
"""``(custom_id, new state, reply JSON or "")``."""


@dataclass
class Flush:
    """One vendor batch in the making, as journaled."""

    cids: list[str]
    state: str = "open"
    opened: float = 0.0
    file: str = ""
    batch: str = ""
    creating: float = 0.0
    """When its create was sent (or is about to be): a create in flight may have reached the vendor."""
    created: float = 0.0
    fails: int = 0
    """Polls failed in a row."""
    status: str = ""
    """The vendor's last word on it (``in_progress``, ``completed``…)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def of(cls, raw: str) -> Flush:
        data = json.loads(raw)
        if isinstance(data.get("cids"), dict):  # Lua's cjson encodes an empty list as an object
            data["cids"] = []
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Request:
    """Who waits for one request: its run, session and agent, and when it joined."""

    run: str
    session: str
    agent: str
    joined: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def of(cls, raw: str | None) -> Request | None:
        return cls(**json.loads(raw)) if raw else None

    def event(self, kind: str, data: dict[str, object]) -> Event:
        return Event(kind=kind, agent=self.agent, run_id=self.run, session_id=self.session, data=data)


@dataclass
class ProviderDesk:
    """One provider key's batch pieces: its API, settings, direct stack (what a request falls back
    to), the pricing of its replies (identity where a wrapper above prices them) and its model."""

    id: str
    api: BatchAPI
    settings: BatchSettings
    direct: Completer
    price: Callable[[Message], Message]
    model: str


class DeskStore(Protocol):
    """Where a desk's state is kept; each write is what :mod:`.work` journals before its next step."""

    async def window(self) -> tuple[int, Request | None]:
        """How many requests wait in the window, and the oldest one's request."""
        ...

    async def open(self, fid: str, most: int) -> list[str]:
        """Move up to ``most`` requests of the window into a new flush ``fid``, due now."""
        ...

    async def flushes(self) -> dict[str, Flush]: ...

    async def due_flushes(self, now: float) -> list[str]: ...

    async def next_poll(self) -> float | None: ...

    async def save(self, fid: str, flush: Flush | None, due: float | None = None,
                   states: list[StateChange] | None = None) -> None:
        """Journal flush ``fid`` (``None``: it is over) due at ``due``, with request state changes."""
        ...

    async def requests(self, cids: list[str]) -> list[tuple[Request | None, str, str]]:
        """``(request, state, reply JSON)`` of each of ``cids``."""
        ...

    async def asked(self, cids: list[str]) -> list[Asked | None]: ...

    async def canceled(self, fid: str) -> int:
        """How many requests of flush ``fid`` were canceled."""
        ...


class Outlet(Protocol):
    """Where a desk's results go: the waiting runs and whoever watches them."""

    async def deliver(self, who: Request, cid: str, reply: Message) -> bool:
        """Hand ``reply`` to the run waiting for ``cid``; False: not yet possible, try again later."""
        ...

    async def emit(self, calls: list[tuple[str, Request]], kind: str, data: dict[str, object]) -> None:
        """One event per waiting run."""
        ...

    async def waiting(self, calls: list[tuple[str, Request]], text: str) -> None:
        """Say what these runs wait for (``openai batch batch_abc (37 requests)``)."""
        ...


class MemoryDesk:
    """A desk in one process (the embedded collector's). Used from one event loop: each method does
    its work without awaiting, so each is atomic there."""

    def __init__(self) -> None:
        self._window: list[str] = []
        self._requests: dict[str, Request] = {}
        self._asked: dict[str, Asked] = {}
        self._states: dict[str, str] = {}
        self._replies: dict[str, str] = {}
        self._flushes: dict[str, Flush] = {}
        self._polls: dict[str, float] = {}
        self._canceled: dict[str, int] = {}

    def join(self, cid: str, request: Request, asked: Asked) -> int:
        """Add a request to the window; the window's size."""
        self._requests[cid], self._asked[cid], self._states[cid] = request, asked, "window"
        self._window.append(cid)
        return len(self._window)

    def drop(self, cid: str) -> None:
        """A caller that gave up: out of the window, or counted as canceled in its flush."""
        state = self._states.get(cid, "")
        if state == "window":
            self._window.remove(cid)
            self.forget(cid)
            return
        if state.startswith("flush:"):
            self._canceled[state[6:]] = self._canceled.get(state[6:], 0) + 1
        else:
            return
        self._states[cid] = "canceled"

    def forget(self, cid: str) -> None:
        """A request whose caller has its answer: nothing of it is kept."""
        for kept in (self._requests, self._asked, self._states, self._replies):
            kept.pop(cid, None)

    async def window(self) -> tuple[int, Request | None]:
        first = self._requests.get(self._window[0]) if self._window else None
        return len(self._window), first

    async def open(self, fid: str, most: int) -> list[str]:
        cids, self._window = self._window[:most], self._window[most:]
        if cids:
            self._flushes[fid] = Flush(cids=cids, opened=time.time())
            self._polls[fid] = 0.0
            for cid in cids:
                self._states[cid] = f"flush:{fid}"
        return cids

    async def flushes(self) -> dict[str, Flush]:
        return dict(self._flushes)

    async def due_flushes(self, now: float) -> list[str]:
        return [fid for fid, at in sorted(self._polls.items(), key=lambda x: x[1]) if at <= now]

    async def next_poll(self) -> float | None:
        return min(self._polls.values(), default=None)

    async def save(self, fid: str, flush: Flush | None, due: float | None = None,
                   states: list[StateChange] | None = None) -> None:
        if flush is None:
            self._flushes.pop(fid, None)
            self._polls.pop(fid, None)
            self._canceled.pop(fid, None)
        else:
            self._flushes[fid] = flush
            if due is not None:
                self._polls[fid] = due
        for cid, state, reply in states or []:
            if state == "forget":
                self.forget(cid)
            elif cid in self._states:
                self._states[cid] = state
                if reply:
                    self._replies[cid] = reply

    async def requests(self, cids: list[str]) -> list[tuple[Request | None, str, str]]:
        return [(self._requests.get(c), self._states.get(c, ""), self._replies.get(c, "")) for c in cids]

    async def asked(self, cids: list[str]) -> list[Asked | None]:
        return [self._asked.get(c) for c in cids]

    async def canceled(self, fid: str) -> int:
        return self._canceled.get(fid, 0)

    def empty(self) -> bool:
        return not self._window and not self._flushes


class Waiters:
    """The embedded outlet: each request's caller waits on a future; events go to a sink."""

    def __init__(self, desk: MemoryDesk, on_event: Callable[[Event], None]) -> None:
        self.desk = desk
        self.on_event = on_event
        self.futures: dict[str, asyncio.Future[Message]] = {}

    async def deliver(self, who: Request, cid: str, reply: Message) -> bool:
        future = self.futures.pop(cid, None)
        if future is not None and not future.done():
            future.set_result(reply)
        self.desk.forget(cid)
        return True

    async def emit(self, calls: list[tuple[str, Request]], kind: str, data: dict[str, object]) -> None:
        for cid, who in calls:
            self.on_event(who.event(kind, {**data, "custom_id": cid}))

    async def waiting(self, calls: list[tuple[str, Request]], text: str) -> None:
        """Nothing to record in one process: the events say it."""
