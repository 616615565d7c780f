"""A local server's window and an overflow, on a real worker (issue 40): the same step machine as
embedded, so a child whose chat does not fit learns the window, compacts and retries there."""

from __future__ import annotations

import asyncio
import json

import pytest

from shelly_dist.engine import Engine
from shelly_dist.events import WARNING
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster, delegate, scripted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SUMMARIZER = "You are a conversation summarizer"
GERMAN = ("Zähle bitte sorgfältig alle Lieferungen der letzten Woche, getrennt nach Lager und Spediteur, "
          "und vergleiche sie mit den Bestellungen. ")


def answers(request: RecordedRequest) -> Reply:
    first = str(((request.body or {}).get("messages") or [{}])[0].get("content", ""))
    if first.startswith(SUMMARIZER):
        return Reply(text="## Goal\nzähle die Ziffern")
    return Reply(text="", tool_calls=[{"name": "task_complete",
                                       "arguments": {"status": "completed", "summary": "gezählt"}}])


async def test_a_child_on_a_worker_whose_chat_overflows_compacts_and_retries_once(cluster: Cluster) -> None:
    # German counts 1.65 tokens per estimated token, and this server has no tokenizer to say so
    # first: the child's first call is refused; the error's n_ctx and n_prompt_tokens teach the worker.
    with ModelServer(context_size=2400, token_ratio=1.65, tokenizer=False, responder=answers) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("counter", GERMAN * 20)), "done"]),
             {"name": "local", "kind": "openai", "model": "m", "base_url": server.url, "api_key": "k",
              "rate_limit": {"max_retries": 0}}],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "counter", "provider": "local", "effects": [{"kind": "loop_detect"}]}],
        )
        cluster.start_worker("w1")
        async with await Engine.open(None, shelly_dir=cluster.root / ".shelly", env=cluster.env()) as engine:
            sub = engine.bus.subscribe(buffer=10_000)
            session = engine.session(persist=False)
            outcome = await asyncio.wait_for(session.send("x" * 700), 120)
            sub.close()
            seen = [e async for e in sub]
    assert outcome.reply.text_content() == "done"
    [entry] = json.loads(next(m for m in reversed(session.agent.chat.messages())
                              if m.tool_results()).tool_results()[0].content)
    assert entry.get("completion", {}).get("summary") == "gezählt", entry
    calls = [r for r in server.requests if r.path.endswith("/chat/completions")]
    summaries = [r for r in calls if str(r.body["messages"][0]["content"]).startswith(SUMMARIZER)]
    assert len(calls) == 3 and len(summaries) == 1, "refused, summarized, retried"
    warnings = [e for e in seen if e.kind == WARNING and e.data.get("code") == "context_overflow"]
    assert [w.agent.split("-")[0] for w in warnings] == ["counter"]
