"""Shelly's batch collector in one process, against the strict stand-in of both vendors' batch APIs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from shelly_dist import events
from shelly_dist.chats import Chat, Message, Role
from shelly_dist.events import Event
from shelly_dist.identity import acting_as
from shelly_dist.models.batching import BATCH_KEY, BatchSettings
from shelly_dist.models.batching.work import POLL_ERROR, SUBMIT_ERROR, TIMEOUT
from shelly_dist.models.usage import Usage
from shelly_dist.providers.factory import create_completer
from shelly_dist.providers.http import aclose_http_client
from shelly_dist.testing.batch_api import BATCH_HEADER
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

FAST = BatchSettings.of(collect_window=0.05, poll_interval=0.05)


@pytest.fixture(autouse=True)
async def _close_http_client() -> AsyncIterator[None]:
    yield
    await aclose_http_client()


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(batch_delay=0.1, default=Reply(text="from the batch", usage={"input": 100, "output": 10})) as s:
        yield s


def build(server: ModelServer, kind: str = "openai", settings: BatchSettings = FAST, sink: list[Event] | None = None):
    return create_completer(kind, name="p", model="m", base_url=server.url, api_key="k", batch=settings,
                            batch_vendor=kind, on_event=(sink if sink is not None else []).append)


def chat(text: str) -> Chat:
    return Chat([Message.text("user", Role.USER, text)])


def direct_calls(server: ModelServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith(("/chat/completions", "/messages"))]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_concurrent_calls_share_one_provider_batch_and_no_direct_call(server: ModelServer, kind: str) -> None:
    completer = build(server, kind)
    replies = await asyncio.gather(*(completer.complete(chat(f"q{i}"), []) for i in range(5)))
    assert [r.text_content() for r in replies] == ["from the batch"] * 5
    [batch] = server.batches.batches()
    assert batch["requests"] == 5 and batch["vendor"] == kind
    assert direct_calls(server) == []
    assert {r.metadata[BATCH_KEY]["batch_id"] for r in replies} == {batch["id"]}
    assert Usage.of(replies[0]).input_tokens == 100
    assert sorted(server.batches.submitted.values()) == [1] * 5


async def test_a_batch_is_submitted_as_soon_as_it_holds_max_batch_size_calls(server: ModelServer) -> None:
    completer = build(server, settings=BatchSettings.of(collect_window=30, poll_interval=0.05, max_batch_size=2))
    replies = await asyncio.wait_for(asyncio.gather(*(completer.complete(chat(f"q{i}"), []) for i in range(4))), 10)
    assert len(replies) == 4
    assert [b["requests"] for b in server.batches.batches()] == [2, 2]


async def test_a_failing_submit_makes_every_call_directly_with_a_fallback_event(server: ModelServer) -> None:
    server.batches.fail("create", 500)
    seen: list[Event] = []
    completer = build(server, sink=seen)
    replies = await asyncio.gather(*(completer.complete(chat(f"q{i}"), []) for i in range(3)))
    assert [r.text_content() for r in replies] == ["from the batch"] * 3
    assert len(direct_calls(server)) == 3 and all(BATCH_KEY not in r.metadata for r in replies)
    fallbacks = [e for e in seen if e.kind == events.BATCH_FALLBACK]
    assert len(fallbacks) == 3 and {e.data["reason"] for e in fallbacks} == {SUBMIT_ERROR}


async def test_errored_and_expired_lines_fall_back_one_by_one(server: ModelServer) -> None:
    def responder(request: RecordedRequest) -> Reply | None:
        text = request.body["messages"][-1]["content"] if isinstance(request.body, dict) else ""
        if text == "expire me" and BATCH_HEADER in request.headers:
            return Reply(text="x", batch_state="expired")
        if text == "break me" and BATCH_HEADER in request.headers:
            return Reply.error(400)
        return None

    server.responder = responder
    seen: list[Event] = []
    completer = build(server, sink=seen)
    texts = ["fine", "expire me", "break me"]
    replies = await asyncio.gather(*(completer.complete(chat(t), []) for t in texts))
    assert [BATCH_KEY in r.metadata for r in replies] == [True, False, False]
    assert len(direct_calls(server)) == 2
    assert sorted(e.data["reason"] for e in seen if e.kind == events.BATCH_FALLBACK) == ["errored", "expired"]


async def test_one_failed_poll_is_polled_again_but_three_in_a_row_cancel_the_batch(server: ModelServer) -> None:
    server.batches.fail("poll", 503, times=1)
    completer = build(server)
    reply = await completer.complete(chat("q"), [])
    assert BATCH_KEY in reply.metadata

    server.batches.fail("poll", 503)
    seen: list[Event] = []
    completer = build(server, sink=seen)
    reply = await completer.complete(chat("q"), [])
    assert BATCH_KEY not in reply.metadata
    assert [e.data["reason"] for e in seen if e.kind == events.BATCH_FALLBACK] == [POLL_ERROR]
    assert server.batches.batches()[-1]["canceled"] is True


async def test_a_batch_past_its_timeout_is_cancelled_and_its_calls_made_directly(server: ModelServer) -> None:
    server.batches.hold()
    seen: list[Event] = []
    completer = build(server, settings=BatchSettings.of(collect_window=0.05, poll_interval=0.05, timeout=0.3),
                      sink=seen)
    reply = await asyncio.wait_for(completer.complete(chat("q"), []), 10)
    assert reply.text_content() == "from the batch" and BATCH_KEY not in reply.metadata
    assert [e.data["reason"] for e in seen if e.kind == events.BATCH_FALLBACK] == [TIMEOUT]
    assert server.batches.batches()[0]["canceled"] is True


async def test_when_every_caller_of_a_submitted_batch_is_gone_the_vendor_batch_is_cancelled(
        server: ModelServer) -> None:
    server.batches.hold()
    completer = build(server)
    calls = [asyncio.create_task(completer.complete(chat(f"q{i}"), [])) for i in range(2)]
    await asyncio.to_thread(server.batches.wait_for_batches, 1)
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    for _ in range(200):
        if server.batches.batches()[0]["canceled"]:
            break
        await asyncio.sleep(0.02)
    assert server.batches.batches()[0]["canceled"] is True
    assert direct_calls(server) == []


async def test_events_name_the_waiting_run_and_its_provider_batch(server: ModelServer) -> None:
    seen: list[Event] = []
    completer = build(server, sink=seen)
    with acting_as("writer", run="r1", session="s1"):
        await completer.complete(chat("q"), [])
    kinds = [e.kind for e in seen]
    assert kinds == [events.MODEL_WAITING, events.BATCH_SUBMITTED, events.BATCH_POLLING, events.BATCH_COMPLETED]
    polling = seen[2]
    assert (polling.agent, polling.run_id, polling.session_id) == ("writer", "r1", "s1")
    assert polling.data["batch_id"] == server.batches.batches()[0]["id"] and polling.data["count"] == 1
    assert polling.data["vendor"] == "openai" and polling.data["provider"] == "p"
