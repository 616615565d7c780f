"""Redis refusing writes is named, waited out, and announced once (``redisio/refusal.py``)."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

from shelly_dist.errors import StoreError
from shelly_dist.redisio import refusal as refusal_module
from shelly_dist.redisio.refusal import RefusalNotice, refusal, write_through


def _wrapped(exc: Exception) -> StoreError:
    try:
        raise StoreError("journal: redis error") from exc
    except StoreError as store:
        return store


def test_a_full_redis_is_named_maxmemory_also_under_a_store_error():
    full = OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    assert refusal(_wrapped(full)) == f"Redis refuses writes (maxmemory): {full}"


def test_a_read_only_replica_and_failing_persistence_are_named():
    assert (refusal(ReadOnlyError("You can't write against a read only replica.")) or "").startswith(
        "Redis refuses writes (read-only replica)")
    misconf = ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's unable to")
    assert (refusal(misconf) or "").startswith("Redis refuses writes (persistence failing)")


def test_an_outage_or_a_bad_command_is_not_a_refusal():
    assert refusal(RedisConnectionError("refused")) is None
    assert refusal(ResponseError("WRONGTYPE Operation against a key")) is None


async def test_a_refused_write_is_tried_again_until_redis_takes_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(refusal_module, "BACKOFF", (0.001, 0.002))
    tries: list[int] = []

    async def write() -> str:
        tries.append(1)
        if len(tries) < 4:
            raise OutOfMemoryError("full")
        return "written"

    assert await write_through(write) == "written"
    assert len(tries) == 4


async def test_any_other_error_of_a_write_propagates_at_once():
    async def write() -> None:
        raise ResponseError("WRONGTYPE")

    with pytest.raises(ResponseError):
        await write_through(write)


def test_the_notice_says_once_when_writes_are_refused_and_once_when_taken_again(caplog: pytest.LogCaptureFixture):
    notice = RefusalNotice()
    with caplog.at_level(logging.WARNING, logger="shelly_dist.redisio.refusal"):
        for refused in ("Redis refuses writes (maxmemory): full", "Redis refuses writes (maxmemory): full", None, None):
            notice.update(refused)
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "Redis refuses writes (maxmemory): full", "Redis takes writes again"]
