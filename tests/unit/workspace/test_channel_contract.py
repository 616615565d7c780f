"""The channel and inboxes, identical in memory and in Redis."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.errors import StoreError
from shelly_dist.workspace import INLINE_LIMIT, Workspace, resource_id


async def test_messages_get_consecutive_ids_and_the_agent_worker_shape(ws: Workspace) -> None:
    first = await ws.send("coder", "hello @reviewer")
    second = await ws.send("reviewer", "hi")
    assert (first.id, second.id) == (1, 2)
    shape = first.as_json()
    assert set(shape) == {"id", "timestamp", "from", "content", "mentions", "kind"}
    assert shape["from"] == "coder" and shape["kind"] == "message"


async def test_mentions_name_only_team_agents_once_each(ws: Workspace) -> None:
    message = await ws.send("coder", "@reviewer @nobody look, @reviewer and @tester! mail a@x")
    assert message.mentions == ["reviewer", "tester"]


async def test_a_dm_is_seen_by_sender_and_recipient_only(ws: Workspace) -> None:
    await ws.send("coder", "secret", to="reviewer")
    assert [m.content for m in await ws.read("reviewer")] == ["secret"]
    assert [m.content for m in await ws.read("coder")] == ["secret"]
    assert await ws.read("tester") == []
    assert [e.message.content for e in await ws.inbox("reviewer")] == ["secret"]


async def test_system_debug_and_output_are_hidden_from_agents_reads(ws: Workspace) -> None:
    for kind in ("system", "debug", "output"):
        await ws.send("coder", f"{kind} @reviewer", kind=kind)
    await ws.send("coder", "visible")
    assert [m.content for m in await ws.read("reviewer")] == ["visible"]
    assert len(await ws.read(None)) == 4
    assert await ws.inbox("reviewer") == []


async def test_read_honours_since_and_limit(ws: Workspace) -> None:
    for i in range(5):
        await ws.send("coder", f"m{i}")
    assert [m.content for m in await ws.read("tester", since=2, limit=2)] == ["m3", "m4"]


async def test_the_inbox_holds_mentions_of_others_after_the_cursor(ws: Workspace) -> None:
    await ws.send("coder", "@reviewer one")
    await ws.send("reviewer", "@reviewer talking to myself")
    await ws.send("coder", "@tester not yours")
    await ws.send("coder", "@reviewer two", kind="tool_call")
    third = await ws.send("tester", "@reviewer three")
    assert [e.message.content for e in await ws.inbox("reviewer")] == ["@reviewer one", "@reviewer three"]
    await ws.ack("reviewer", 1)
    assert [e.message.id for e in await ws.inbox("reviewer")] == [third.id]


async def test_priority_is_high_for_several_mentions_or_urgent_words(ws: Workspace) -> None:
    await ws.send("coder", "@reviewer normal")
    await ws.send("coder", "@reviewer @tester both")
    await ws.send("coder", "@reviewer I am BLOCKED")
    assert [e.priority for e in await ws.inbox("reviewer")] == ["normal", "high", "high"]


async def test_an_ack_never_moves_back_nor_past_the_last_message(ws: Workspace) -> None:
    await ws.send("coder", "@reviewer a")
    await ws.send("coder", "@reviewer b")
    assert await ws.ack("reviewer", 99) == 2
    assert await ws.ack("reviewer", 1) == 2
    assert await ws.cursor("reviewer") == 2


async def test_concurrent_acks_keep_the_highest(ws: Workspace) -> None:
    for i in range(10):
        await ws.send("coder", f"@reviewer {i}")
    await asyncio.gather(*(ws.ack("reviewer", n) for n in (3, 10, 7, 1)))
    assert await ws.cursor("reviewer") == 10


async def test_the_inbox_up_to_a_high_water_mark_leaves_later_messages(ws: Workspace) -> None:
    await ws.send("coder", "@reviewer early")
    mark = await ws.last_id()
    await ws.send("coder", "@reviewer late")
    assert [e.message.content for e in await ws.inbox("reviewer", up_to=mark)] == ["@reviewer early"]


async def test_a_message_of_the_inline_limit_stays_inline(ws: Workspace) -> None:
    text = "@reviewer " + "x" * (INLINE_LIMIT - len("@reviewer "))
    message = await ws.send("coder", text)
    assert message.content == text


async def test_a_longer_message_becomes_a_resource_keeping_its_mentions(ws: Workspace) -> None:
    text = "@reviewer @tester " + "y" * (INLINE_LIMIT + 1 - len("@reviewer @tester "))
    message = await ws.send("coder", text)
    rid = resource_id(text)
    assert message.content.startswith("@reviewer @tester ")
    assert f'resource_read("{rid}")' in message.content
    assert message.mentions == ["reviewer", "tester"]
    assert await ws.resource_read(rid) == text


async def test_resources_are_content_addressed(ws: Workspace) -> None:
    first = await ws.resource_create("same")
    assert await ws.resource_create("same") == first == resource_id("same")
    with pytest.raises(StoreError, match='resource_read: resource "nope" not found'):
        await ws.resource_read("nope")


async def test_a_dm_to_a_stranger_is_refused(ws: Workspace) -> None:
    with pytest.raises(StoreError, match='"ghost" is not a member'):
        await ws.send("coder", "hi", to="ghost")


async def test_status_is_kept_per_agent(ws: Workspace) -> None:
    await ws.status_set("coder", "running", "fixing the parser")
    statuses = await ws.statuses()
    assert statuses["coder"].state == "running" and statuses["coder"].task == "fixing the parser"
    assert statuses["coder"].updated_at > 0


async def test_only_one_holder_of_an_agents_wake_lease(ws: Workspace) -> None:
    assert await ws.acquire_wake("coder", "a", 5)
    assert not await ws.acquire_wake("coder", "b", 5)
    assert not await ws.renew_wake("coder", "b", 5)
    assert await ws.renew_wake("coder", "a", 5)
    await ws.release_wake("coder", "b")
    assert not await ws.acquire_wake("coder", "b", 5)
    await ws.release_wake("coder", "a")
    assert await ws.acquire_wake("coder", "b", 5)


async def test_the_holder_of_a_wake_lease_may_take_it_again(ws: Workspace) -> None:
    assert await ws.acquire_wake("coder", "a", 5)
    assert await ws.acquire_wake("coder", "a", 5)
