"""Sending a command under ``socket_timeout`` without a task per command (Python 3.11).

redis-py's asyncio connection bounds each send with ``asyncio.wait_for(…, socket_timeout)``. Before
Python 3.12, ``wait_for`` wraps the send in a new task and waits a turn of the event loop for it:
≈ 35 µs of CPU per command measured here (a ``GET`` loop: 82–95 µs of client CPU per command with a
socket timeout, 44–53 µs without), paid by every journal write of every worker and coordinator.
:class:`TimedSend` sends the same bytes; when all of them went to the socket at once (the buffer is
empty: the usual case) there is nothing to wait for, else it bounds the wait for the buffer to
drain with ``asyncio.timeout``, which needs no task. A write that did not drain in time still fails as
redis-py's does (``TimeoutError: Timeout writing to socket``, the connection dropped), so the retry
policy in :mod:`.connection` is unchanged.

It replaces one method of redis-py's, so it is used only where that method has the shape it was
written against (:func:`timed_send`): on Python 3.12+ ``wait_for`` needs no task and the class is
left as it is, and a redis-py whose send no longer calls ``wait_for`` is left alone too.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

C = TypeVar("C", bound=type[AbstractConnection])


class TimedSend:
    """A mixin for a redis-py asyncio connection class (see the module docstring)."""

    socket_timeout: float | None
    _writer: Any

    async def send_packed_command(self, command: bytes | str | Iterable[bytes], check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        conn: Any = self
        if not conn.is_connected:
            await conn.connect_check_health(check_health=False)
        if check_health:
            await conn.check_health()
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            self._writer.writelines(command)
            if self._writer.transport.get_write_buffer_size() == 0:
                await self._writer.drain()  # all of it went to the socket: cannot wait, only raise
            else:
                async with asyncio.timeout(timeout):
                    await self._writer.drain()
        except TimeoutError:  # before OSError: the builtin TimeoutError is one
            await conn.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await conn.disconnect(nowait=True)
            err_no, errmsg = ("UNKNOWN", exc.args[0]) if len(exc.args) == 1 else exc.args[:2]
            raise RedisConnectionError(f"Error {err_no} while writing to socket. {errmsg}.") from exc
        except BaseException:
            # A send cut short (cancelled) leaves part of a command on the wire: the connection is
            # of no further use, as in redis-py.
            await conn.disconnect(nowait=True)
            raise


@functools.cache
def timed_send(cls: C) -> C:
    """``cls`` with :class:`TimedSend` mixed in, where it applies (else ``cls`` itself)."""
    if sys.version_info >= (3, 12) or not _sends_with_wait_for(cls):
        return cls
    return type(f"Timed{cls.__name__}", (TimedSend, cls), {})  # type: ignore[return-value]


def _sends_with_wait_for(cls: type) -> bool:
    """Whether ``cls``'s send is the one :class:`TimedSend` replaces: it bounds the send with
    ``asyncio.wait_for`` and connects through ``connect_check_health`` (redis-py 7–8)."""
    try:
        source = inspect.getsource(cls.send_packed_command)
    except (OSError, TypeError):
        return False
    return "asyncio.wait_for(" in source and "connect_check_health" in source and hasattr(cls, "check_health")
