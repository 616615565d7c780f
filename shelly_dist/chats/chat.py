"""The chat: an ordered list of messages that waiters can follow.

Like Shelly's, every change wakes every waiter, who then re-checks the length: a waiter never
relies on being told *what* changed, so no wake-up can be lost. The list is guarded by a
threading lock (never held across an await) so appends from worker threads are safe too; waiters
are woken on their own event loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

from shelly_dist.chats.message import Message
from shelly_dist.chats.role import Role
from shelly_dist.errors import UsageError


class Chat:
    """Ordered messages with ``append``/``replace`` and an async ``wait`` for growth."""

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._messages: list[Message] = list(messages)
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.rewrites = 0
        """How often the history was rewritten in place (``replace_all``, ``clear``): a journal
        that stores only appended messages must store the whole chat again after a rewrite."""

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            if loop.is_closed():
                continue

            def wake(f: asyncio.Future[None] = fut) -> None:
                if not f.done():
                    f.set_result(None)

            try:
                loop.call_soon_threadsafe(wake)
            except RuntimeError:  # the loop closed after the check: nobody is left to wake
                continue

    def append(self, *messages: Message) -> None:
        """Add messages at the end and wake every waiter."""
        with self._lock:
            self._messages.extend(messages)
            self._notify()

    def replace(self, index: int, message: Message) -> None:
        """Replace the message at ``index`` and wake every waiter."""
        with self._lock:
            self._check(index)
            self._messages[index] = message
            self._notify()

    def replace_all(self, *messages: Message) -> None:
        """Swap the whole list for ``messages`` and wake every waiter (Shelly's ``Replace``)."""
        with self._lock:
            self._messages = list(messages)
            self.rewrites += 1
            self._notify()

    def insert(self, index: int, message: Message) -> None:
        """Insert a message before ``index`` and wake every waiter."""
        with self._lock:
            self._messages.insert(index, message)
            self._notify()

    def clear(self) -> None:
        """Remove every message."""
        with self._lock:
            self._messages.clear()
            self.rewrites += 1
            self._notify()

    def __len__(self) -> int:
        return len(self._messages)

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self._messages):
            raise UsageError(f"chat: index {index} out of range (len {len(self._messages)})")

    def at(self, index: int) -> Message:
        """The message at ``index`` (a copy). Out of range raises ``UsageError``."""
        with self._lock:
            self._check(index)
            return self._messages[index].model_copy(deep=True)

    def last(self) -> Message | None:
        """The last message (a copy), or ``None`` when empty."""
        with self._lock:
            return self._messages[-1].model_copy(deep=True) if self._messages else None

    def messages(self) -> list[Message]:
        """A deep copy of every message: changing it never changes the chat."""
        with self._lock:
            return [m.model_copy(deep=True) for m in self._messages]

    def view(self, start: int = 0) -> tuple[Message, ...]:
        """The messages themselves from ``start`` on, without copying: for readers that only look
        (encoding a request, journaling). Never modify what it returns; use :meth:`messages` for
        copies you may change."""
        with self._lock:
            return tuple(self._messages[start:])

    def since(self, offset: int) -> list[Message] | None:
        """Copies of the messages from ``offset`` on; ``None`` when offset < 0 or >= len."""
        with self._lock:
            if offset < 0 or offset >= len(self._messages):
                return None
            return [m.model_copy(deep=True) for m in self._messages[offset:]]

    def by_sender(self, sender: str) -> list[Message]:
        """Copies of the messages sent by ``sender``."""
        with self._lock:
            return [m.model_copy(deep=True) for m in self._messages if m.sender == sender]

    def system_prompt(self) -> str:
        """The text of the first system-role message anywhere in the chat ("" when none)."""
        with self._lock:
            for m in self._messages:
                if m.role == Role.SYSTEM:
                    return m.text_content()
        return ""

    async def wait(self, n: int) -> int:
        """Wait until the chat holds more than ``n`` messages; return the length then.

        Woken by every change (``append``, ``replace``, ``replace_all``, ``insert``, ``clear``)
        from any thread; cancellation propagates and leaves no waiter behind.
        """
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if len(self._messages) > n:
                    return len(self._messages)
                fut: asyncio.Future[None] = loop.create_future()
                entry = (loop, fut)
                self._waiters.append(entry)
            try:
                await fut
            finally:
                with self._lock:
                    if entry in self._waiters:
                        self._waiters.remove(entry)
