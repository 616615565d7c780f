"""Saved sessions in Redis: the same shapes and API as the directory store, TTL-bounded."""

from __future__ import annotations

import fakeredis
import pytest

from shelly_dist.chats import Image, Message, Role
from shelly_dist.engine.redis_sessions import RedisSessionStore
from shelly_dist.engine.sessions import SessionInfo
from shelly_dist.errors import StoreError
from shelly_dist.redisio.keys import Keys

PNG = "iVBORw0KGgo="


@pytest.fixture
def client() -> fakeredis.FakeAsyncRedis:
    return fakeredis.FakeAsyncRedis()


def store(client: fakeredis.FakeAsyncRedis, retention: float = 3600) -> RedisSessionStore:
    return RedisSessionStore(lambda: client, Keys("t:"), retention=retention)


def chat(text: str) -> list[Message]:
    return [
        Message.text("user", Role.USER, text),
        Message(sender="user", role=Role.USER, parts=[Image(data=PNG, media_type="image/png")]),
    ]


async def test_saved_session_loads_back_with_its_messages_and_attachments(client: fakeredis.FakeAsyncRedis) -> None:
    saved = await store(client).save(SessionInfo(agent="a"), chat("hello"))
    info, messages = await store(client).load(saved.id)
    assert (info.id, info.agent, info.msg_count, info.preview) == (saved.id, "a", 2, "hello")
    assert messages == chat("hello")


async def test_saved_session_and_index_carry_the_retention_ttl(client: fakeredis.FakeAsyncRedis) -> None:
    saved = await store(client, retention=60).save(SessionInfo(agent="a"), chat("x"))
    assert 0 < await client.ttl(f"t:s:{{{saved.id}}}:saved") <= 60
    assert 0 < await client.ttl("t:sessions") <= 60


async def test_list_is_newest_first_and_forgets_expired_records(client: fakeredis.FakeAsyncRedis) -> None:
    old = await store(client).save(SessionInfo(agent="a"), chat("old"))
    new = await store(client).save(SessionInfo(agent="a"), chat("new"))
    gone = await store(client).save(SessionInfo(agent="a"), chat("gone"))
    await client.delete(f"t:s:{{{gone.id}}}:saved")  # as its TTL would
    assert [i.id for i in await store(client).list()] == [new.id, old.id]
    assert await client.zscore("t:sessions", gone.id) is None


async def test_missing_session_is_a_store_error_and_delete_is_idempotent(client: fakeredis.FakeAsyncRedis) -> None:
    saved = await store(client).save(SessionInfo(agent="a"), chat("x"))
    await store(client).delete(saved.id)
    await store(client).delete(saved.id)
    with pytest.raises(StoreError, match="not found"):
        await store(client).load(saved.id)
