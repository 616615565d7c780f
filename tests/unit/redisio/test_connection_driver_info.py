"""Every connection of a client shares one ``DriverInfo``: redis-py would otherwise read its own
version from the installed distributions (``importlib.metadata``) for each new connection, 0.8 ms
of CPU apiece, paid hundreds of times by a worker whose fan-out opens connections."""

from __future__ import annotations

import pytest
import redis.utils

from shelly_dist.redisio.connection import connect


def refuse(*args: object) -> str:
    raise AssertionError("importlib.metadata.version read for a new connection")


async def test_new_connections_do_not_read_the_library_version_again(monkeypatch: pytest.MonkeyPatch) -> None:
    client = connect("redis://127.0.0.1:6399/0", client_name="t")  # never connected: no server needed
    try:
        client.connection_pool.make_connection()  # the first one may build the shared info
        monkeypatch.setattr(redis.utils.metadata, "version", refuse)
        first = client.connection_pool.make_connection()
        second = client.connection_pool.make_connection()
        assert first.driver_info is second.driver_info
    finally:
        await client.aclose()
