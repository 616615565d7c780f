"""Streamed replies (issue 37): each vendor's server-sent events from the loopback server, put back
into the reply the unstreamed answer gives, with the text handed to the watcher as it comes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from shelly_dist.errors import ModelHTTPError
from shelly_dist.models import streaming
from shelly_dist.models.classify import NETWORK, OVERLOADED
from shelly_dist.models.speed import SPEED
from shelly_dist.providers.anthropic import AnthropicCompleter, AnthropicStream
from shelly_dist.providers.factory import create_completer
from shelly_dist.providers.gemini import GeminiCompleter
from shelly_dist.providers.http import HTTPCompleter
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.providers.sse import SSEReader
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.unit.providers.conftest import ToolDef, chat_of, system, user

KINDS: dict[str, type[HTTPCompleter]] = {
    "openai": OpenAICompleter,
    "anthropic": AnthropicCompleter,
    "gemini": GeminiCompleter,
}
CALL = {"name": "fs_read", "arguments": {"path": "notes/a b.md", "limit": 3}, "id": "call_7"}
TEXT = "Rayleigh scattering: short blue wavelengths scatter most."


class Watcher:
    """A ``Deltas`` that records what it is given."""

    def __init__(self) -> None:
        self.begins = 0
        self.pieces: list[str] = []

    def begin(self) -> None:
        self.begins += 1
        self.pieces.clear()

    def text(self, delta: str) -> None:
        self.pieces.append(delta)


def make(kind: str, server: ModelServer, **kw: object) -> HTTPCompleter:
    return KINDS[kind](model="m-1", base_url=server.url, api_key="k", **kw)  # type: ignore[arg-type]


async def complete(completer: HTTPCompleter, watcher: Watcher | None) -> object:
    with streaming.streaming_to(watcher):
        return await completer.complete(chat_of(system(), user()), [ToolDef("fs_read")])


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_streamed_reply_is_the_reply_the_whole_answer_gives(kind: str, server: ModelServer) -> None:
    reply = Reply(text=TEXT, tool_calls=[CALL], usage={"input": 40, "output": 12})
    server.push(reply, reply)
    whole = await complete(make(kind, server), None)
    watcher = Watcher()
    streamed = await complete(make(kind, server), watcher)
    assert [p.model_dump(exclude={"id"}) for p in streamed.parts] == [p.model_dump(exclude={"id"}) for p in whole.parts]
    if kind != "gemini":  # Gemini sends no call ids: each reply draws its own
        assert [c.id for c in streamed.tool_calls()] == [c.id for c in whole.tool_calls()] == ["call_7"]
    # the usage and the stop reason (the measured speed is the call's own)
    assert {k: v for k, v in streamed.metadata.items() if k != SPEED} == {
        k: v for k, v in whole.metadata.items() if k != SPEED}
    assert watcher.begins == 1 and "".join(watcher.pieces) == TEXT and len(watcher.pieces) > 1


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_the_request_asks_for_a_stream_only_when_someone_watches(kind: str, server: ModelServer) -> None:
    await complete(make(kind, server), None)
    await complete(make(kind, server), Watcher())
    plain, streamed = server.requests
    if kind == "gemini":
        assert plain.path.endswith(":generateContent")
        assert streamed.path.endswith(":streamGenerateContent?alt=sse") and streamed.body == plain.body
    else:
        assert "stream" not in plain.body and streamed.body["stream"] is True
    if kind == "openai":
        assert streamed.body["stream_options"] == {"include_usage": True}


async def test_stream_false_on_the_provider_never_streams(server: ModelServer) -> None:
    watcher = Watcher()
    await complete(make("anthropic", server, stream=False), watcher)
    assert "stream" not in server.requests[0].body and watcher.begins == 0


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_text_reaches_the_watcher_before_the_answer_ends(kind: str, server: ModelServer) -> None:
    gate = threading.Event()
    server.push(Reply(text=TEXT, stream_gate=gate))
    watcher = Watcher()
    call = asyncio.ensure_future(complete(make(kind, server), watcher))
    try:
        for _ in range(600):  # the server holds the rest of the answer until the gate opens
            if watcher.pieces:
                break
            await asyncio.sleep(0.05)
        assert watcher.pieces == [TEXT.split(" ")[0] + " "] and not call.done()
    finally:
        gate.set()
    assert (await call).text_content() == TEXT


async def test_a_stream_cut_short_is_a_network_error_retried_from_the_start(server: ModelServer) -> None:
    server.push(Reply(text=TEXT, stream_cut=True), Reply(text=TEXT))
    completer = create_completer("openai", name="p", model="m", base_url=server.url, api_key="k")
    watcher = Watcher()
    with streaming.streaming_to(watcher):
        reply = await completer.complete(chat_of(user()), [])
    assert reply.text_content() == TEXT and watcher.begins == 2 and "".join(watcher.pieces) == TEXT


async def test_a_stream_cut_short_says_so() -> None:
    with ModelServer(default=Reply(text=TEXT, stream_cut=True)) as server, pytest.raises(ModelHTTPError) as caught:
        await complete(make("anthropic", server), Watcher())
    assert caught.value.kind == NETWORK and "before message_stop" in str(caught.value)


def test_an_anthropic_error_event_is_classified_as_its_answer_would_be() -> None:
    stream = AnthropicStream(provider="claude", model="m")
    with pytest.raises(ModelHTTPError) as caught:
        stream.feed("error", '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}')
    assert caught.value.kind == OVERLOADED and caught.value.provider == "claude"


def test_events_are_read_with_their_names_across_lines_and_comments() -> None:
    reader = SSEReader()
    lines = [": keep-alive", "event: ping", "data: {}", "", "data: a", "data: b", "", "data: [DONE]"]
    events = [e for e in (reader.feed(line + "\n") for line in lines) if e is not None]
    assert [*events, reader.end()] == [("ping", "{}"), ("", "a\nb"), ("", "[DONE]")]
