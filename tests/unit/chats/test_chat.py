"""The chat: copies out, errors on bad indexes, and ``wait`` that no change can slip past."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from shelly_dist.chats import Chat, Message, Role, Text
from shelly_dist.errors import UsageError

DEADLINE = 10.0


def user(text: str, sender: str = "user") -> Message:
    return Message.text(sender, Role.USER, text)


async def settle(task: asyncio.Task[int]) -> None:
    """Let ``task`` run until it parks on the chat (a few loop turns, no wall-clock wait)."""
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done(), "wait returned before the chat changed"


async def test_wait_returns_at_once_when_longer_than_n() -> None:
    chat = Chat([user("a"), user("b")])
    assert await asyncio.wait_for(chat.wait(1), DEADLINE) == 2


@pytest.mark.parametrize("change", ["append", "replace_all"])
async def test_wait_on_a_fresh_chat_blocks_until_a_change_from_another_thread(change: str) -> None:
    chat = Chat()
    waiter = asyncio.create_task(chat.wait(0))
    await settle(waiter)
    thread = threading.Thread(target=getattr(chat, change), args=(user("hi"),))
    thread.start()
    assert await asyncio.wait_for(waiter, DEADLINE) == 1
    thread.join()


@pytest.mark.parametrize("change", ["append", "replace_all"])
async def test_wait_blocks_until_a_change_from_another_task(change: str) -> None:
    chat = Chat()
    waiter = asyncio.create_task(chat.wait(0))
    await settle(waiter)

    async def writer() -> None:
        getattr(chat, change)(user("a"), user("b"))

    await asyncio.create_task(writer())
    assert await asyncio.wait_for(waiter, DEADLINE) == 2


async def test_replace_at_an_index_wakes_waiters_who_keep_waiting_while_length_is_unchanged() -> None:
    chat = Chat([user("a")])
    waiter = asyncio.create_task(chat.wait(1))
    await settle(waiter)
    chat.replace(0, user("b"))
    await settle(waiter)
    chat.append(user("c"))
    assert await asyncio.wait_for(waiter, DEADLINE) == 2


async def test_cancelled_wait_raises_cancelled_error() -> None:
    chat = Chat()
    waiter = asyncio.create_task(chat.wait(0))
    await settle(waiter)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_wait_under_a_timeout_raises_timeout_error() -> None:
    chat = Chat()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await chat.wait(0)


async def test_a_cancelled_waiter_does_not_stop_the_others_from_waking() -> None:
    chat = Chat()
    gone = asyncio.create_task(chat.wait(0))
    kept = asyncio.create_task(chat.wait(0))
    await settle(gone)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    chat.append(user("x"))
    assert await asyncio.wait_for(kept, DEADLINE) == 1


async def test_one_append_wakes_five_waiters() -> None:
    chat = Chat()
    waiters = [asyncio.create_task(chat.wait(0)) for _ in range(5)]
    for w in waiters:
        await settle(w)
    chat.append(user("x"))
    assert await asyncio.wait_for(asyncio.gather(*waiters), DEADLINE) == [1] * 5


def test_messages_returns_copies() -> None:
    chat = Chat([user("orig")])
    got = chat.messages()
    got[0].parts[0] = Text(text="changed")
    got[0].metadata["k"] = "v"
    got.append(user("extra"))
    assert chat.at(0).text_content() == "orig"
    assert chat.at(0).metadata == {}
    assert len(chat) == 1


def test_since_returns_copies() -> None:
    chat = Chat([user("a"), user("b")])
    got = chat.since(1)
    assert got is not None and [m.text_content() for m in got] == ["b"]
    got[0].parts.append(Text(text="!"))
    assert chat.at(1).text_content() == "b"


def test_at_returns_a_copy() -> None:
    chat = Chat([user("a")])
    chat.at(0).parts.clear()
    assert chat.at(0).text_content() == "a"


@pytest.mark.parametrize("offset", [-1, 2, 5])
def test_since_is_none_for_negative_or_out_of_range_offset(offset: int) -> None:
    chat = Chat([user("a"), user("b")])
    assert chat.since(offset) is None


def test_since_zero_on_an_empty_chat_is_none() -> None:
    assert Chat().since(0) is None


def test_system_prompt_finds_a_system_message_that_is_not_first() -> None:
    chat = Chat([user("hi"), Message.text("a", Role.SYSTEM, "be brief"), Message.text("a", Role.SYSTEM, "later")])
    assert chat.system_prompt() == "be brief"


def test_system_prompt_is_empty_without_a_system_message() -> None:
    assert Chat([user("hi")]).system_prompt() == ""


@pytest.mark.parametrize("index", [-1, 1, 10])
def test_at_out_of_range_raises_usage_error(index: int) -> None:
    with pytest.raises(UsageError, match="chat: index"):
        Chat([user("a")]).at(index)


def test_replace_out_of_range_raises_usage_error() -> None:
    with pytest.raises(UsageError, match="chat: index"):
        Chat().replace(0, user("a"))


def test_last_is_none_on_an_empty_chat_and_the_last_message_otherwise() -> None:
    chat = Chat()
    assert chat.last() is None
    chat.append(user("a"), user("b"))
    last = chat.last()
    assert last is not None and last.text_content() == "b"


def test_by_sender_keeps_only_that_senders_messages_in_order() -> None:
    chat = Chat([user("1", "x"), user("2", "y"), user("3", "x")])
    assert [m.text_content() for m in chat.by_sender("x")] == ["1", "3"]


def test_insert_and_clear_change_the_list() -> None:
    chat = Chat([user("b")])
    chat.insert(0, user("a"))
    assert [m.text_content() for m in chat.messages()] == ["a", "b"]
    chat.clear()
    assert len(chat) == 0


async def test_ten_writers_of_a_hundred_alongside_readers_and_waiters_end_with_1000_messages() -> None:
    writers, per_writer, total = 10, 100, 1000
    chat = Chat()
    writing = threading.Event()

    def write(w: int) -> None:
        for i in range(per_writer):
            chat.append(Message.text(f"w{w}", Role.USER, str(i)))

    def read() -> None:
        while writing.is_set():
            msgs = chat.messages()
            tail = chat.since(len(msgs) // 2)
            assert tail is None or len(tail) >= len(msgs) - len(msgs) // 2

    async def follow() -> list[Message]:
        seen: list[Message] = []
        cursor = 0
        while cursor < total:
            await chat.wait(cursor)
            batch = chat.since(cursor) or []
            seen.extend(batch)
            cursor += len(batch)
        return seen

    followers = [asyncio.create_task(follow()) for _ in range(3)]
    loop = asyncio.get_running_loop()
    writing.set()
    with ThreadPoolExecutor(max_workers=writers + 2) as pool:
        readers = [loop.run_in_executor(pool, read) for _ in range(2)]
        await asyncio.gather(*(loop.run_in_executor(pool, write, w) for w in range(writers)))
        writing.clear()
        await asyncio.gather(*readers)
    async with asyncio.timeout(DEADLINE):
        results = await asyncio.gather(*followers)

    assert len(chat) == total
    for seen in results:
        assert len(seen) == total
        for w in range(writers):
            assert [m.text_content() for m in seen if m.sender == f"w{w}"] == [str(i) for i in range(per_writer)]
