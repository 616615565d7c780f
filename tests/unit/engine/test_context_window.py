"""A local server's window and token counts, learned at run time, and overflow that recovers
(issue 40): against the loopback server answering as llama-server does — ``/props``, ``/v1/models``,
``/tokenize``, the 400 overflow body with ``n_ctx`` — and counting German as its tokenizer does
(1.65 tokens per characters / 4)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.agent.overflow import CONTEXT_OVERFLOW
from shelly_dist.engine import Engine, config_from_data
from shelly_dist.errors import ContextTooLong
from shelly_dist.events import WARNING, Event
from shelly_dist.providers.http import aclose_http_client
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

GERMAN = ("Die Überprüfung der Lieferkette ergab, dass die Verzögerungen hauptsächlich durch fehlende "
          "Zollunterlagen und unvollständige Frachtbriefe verursacht wurden; außerdem müssen wir die "
          "Zuständigkeiten zwischen Einkauf, Logistik und Buchhaltung klären, bevor der nächste Quartalsbericht "
          "an die Geschäftsführung geht. ")
SUMMARIZER = "You are a conversation summarizer"


@pytest.fixture(autouse=True)
async def _close_http_client() -> AsyncIterator[None]:
    yield
    await aclose_http_client()


def summarizing(request: RecordedRequest) -> bool:
    messages = (request.body or {}).get("messages") or [{}]
    return str(messages[0].get("content", "")).startswith(SUMMARIZER)


def german_answers(request: RecordedRequest) -> Reply:
    if summarizing(request):
        return Reply(text="## Goal\nLieferkette prüfen.\n## Current State\nZwischenstand besprochen.")
    return Reply(text=GERMAN * 3)


def config(server: ModelServer, **agent: Any) -> Any:
    return config_from_data({
        "providers": [{"name": "local", "kind": "openai", "base_url": server.url, "model": "smollm2",
                       "api_key": "sk-local", "rate_limit": {"max_retries": 0}}],
        "agents": [{"name": "assistant", "description": "answers", **agent}],
    }, {})


def turns_answered(server: ModelServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith("/chat/completions") and not summarizing(r)]


async def test_a_german_session_with_no_context_window_runs_14_turns_compacting_when_needed(tmp_path: Path) -> None:
    with ModelServer(context_size=2048, token_ratio=1.65, timings=True, responder=german_answers) as server:
        async with await Engine.open(config(server), shelly_dir=tmp_path / ".shelly") as engine:
            session = engine.session()
            for turn in range(14):
                outcome = await session.send(f"Frage {turn}: {GERMAN * 2}")
                assert outcome.reply.text_content().startswith("Die Überprüfung"), f"turn {turn}"
            window = engine.providers.window_for("assistant")
    assert (window.tokens, window.source) == (2048, "server")
    assert 1.3 < window.ratio < 3.0, window.ratio
    assert sum(summarizing(r) for r in server.requests) >= 2, "the session was compacted as it grew"
    assert len(turns_answered(server)) == 14, "no turn's call was refused for overflow"


async def test_an_overflow_compacts_and_retries_the_call_once_even_without_a_compaction_effect(
    tmp_path: Path,
) -> None:
    # The estimate is blind here: no tokenizer counts (the ratio is learned from replies only), and
    # every text is counted 4× as the estimate — digits, as llama.cpp counts them.
    with ModelServer(context_size=2048, token_ratio=4.0, responder=german_answers) as server:
        cfg = config(server, effects=[{"kind": "loop_detect"}])
        async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
            stream = engine.bus.subscribe(buffer=10_000)
            session = engine.session()
            await session.send("1" * 300)
            outcome = await session.send("2" * 1500)
            events = await drained(stream)
    assert outcome.reply.text_content().startswith("Die Überprüfung")
    [warning] = warnings_of(events)
    assert "compacted and the call retried" in warning.data["message"]
    refused = [r for r in server.requests if not summarizing(r)]
    assert len(refused) == 3, "turn 1, turn 2 refused for overflow, turn 2 retried after compacting"
    assert sum(summarizing(r) for r in server.requests) == 1
    assert "1111" not in str(refused[-1].body), "the retry sent the compacted chat"


async def test_a_message_too_large_for_the_window_fails_with_one_line_naming_the_sizes_and_the_fix(
    tmp_path: Path,
) -> None:
    with ModelServer(context_size=512, responder=german_answers) as server:
        async with await Engine.open(config(server), shelly_dir=tmp_path / ".shelly") as engine:
            with pytest.raises(ContextTooLong) as caught:
                await engine.session().send(GERMAN * 40)
    message = str(caught.value)
    assert "\n" not in message
    assert "does not fit the window of 512 tokens" in message and "context_window" in message
    assert "largest message" in message


async def test_the_window_is_learned_from_an_overflow_errors_n_ctx_when_the_server_does_not_say_it(
    tmp_path: Path,
) -> None:
    body = ('{"error":{"code":400,"message":"request (3000 tokens) exceeds the available context size (1024 '
            'tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3000,"n_ctx":1024}}')
    with ModelServer() as server:
        server.push(Reply.error(400, body), Reply(text="## Goal\nsay hallo"), Reply(text="after"))
        async with await Engine.open(config(server), shelly_dir=tmp_path / ".shelly") as engine:
            outcome = await engine.session().send("hallo " * 10)
            window = engine.providers.window_for("assistant")
    assert outcome.reply.text_content() == "after"
    assert (window.tokens, window.source) == (1024, "the server's overflow error")


async def test_a_configured_context_window_is_never_replaced_by_the_servers(tmp_path: Path) -> None:
    with ModelServer(context_size=2048, responder=german_answers) as server:
        cfg = config_from_data({
            "providers": [{"name": "local", "kind": "openai", "base_url": server.url, "model": "m",
                           "api_key": "sk-local", "context_window": 4096}],
            "agents": [{"name": "assistant"}],
        }, {})
        async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
            await engine.session().send("hallo")
            window = engine.providers.window_for("assistant")
    assert (window.tokens, window.source, window.learn) == (4096, "config", False)
    assert server.probes == [], "the server was not asked its window"


async def test_the_servers_tokens_per_second_reach_the_message_event(tmp_path: Path) -> None:
    with ModelServer(timings=True, responder=german_answers) as server:
        async with await Engine.open(config(server), shelly_dir=tmp_path / ".shelly") as engine:
            stream = engine.bus.subscribe(buffer=10_000)
            await engine.session().send("hallo")
            seen = await drained(stream)
    [added] = [e for e in seen if e.kind == "message_added" and e.data.get("role") == "assistant"]
    assert added.data["speed"] == {"tokens_per_second": 42.0, "prompt_tokens_per_second": 850.0, "source": "server"}


async def drained(stream: Any) -> list[Event]:
    stream.close()
    return [e async for e in stream]


def warnings_of(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == WARNING and e.data.get("code") == CONTEXT_OVERFLOW]
