"""A watched run streams its replies on both runtimes (issue 37): a child's text reaches the live
view while its model is still writing — embedded, and from a ``shelly worker`` through the
session's event stream — and the reply is journaled whole, once."""

from __future__ import annotations

import asyncio
import io
import json
import threading

import pytest
import yaml
from rich.console import Console

from shelly_dist.cli.live import LiveView
from shelly_dist.engine import Engine
from shelly_dist.events import Event
from shelly_dist.models import streaming
from shelly_dist.redisio.keys import Keys
from shelly_dist.testing.model_server import ModelServer, Reply

from .support import Cluster, cluster, delegate, until_every_run_ended

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TEXT = "Sunlight scatters off air molecules, and blue light scatters the most."


def team(cluster: Cluster, server: ModelServer, runtime: str) -> None:
    providers = [
        {"name": "lead", "kind": "scripted", "model": "script",
         "script": {"lead": [delegate({"agent": "writer", "task": "why blue"}), "the writer said: {result}"]}},
        {"name": "vendor", "kind": "openai", "model": "m", "base_url": server.url, "api_key": "k",
         "rate_limit": {"max_retries": 0}},
    ]
    agents = [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
              {"name": "writer", "provider": "vendor"}]
    if runtime == "pool":
        cluster.write_config(providers, agents, entry_agent="lead")
        cluster.start_worker("w1")
    else:
        config = {"providers": providers, "agents": agents, "entry_agent": "lead"}
        (cluster.root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.mark.parametrize("runtime", ["embedded", "pool"])
async def test_a_childs_reply_reaches_the_live_view_before_it_ends_and_is_journaled_once(
        cluster: Cluster, runtime: str) -> None:
    gate = threading.Event()
    with ModelServer(format="openai", responder=lambda r: Reply(text=TEXT, stream_gate=gate)) as server:
        team(cluster, server, runtime)
        async with await Engine.open(None, shelly_dir=cluster.root / ".shelly", env=cluster.env()) as engine:
            seen: list[Event] = []
            sub = engine.bus.subscribe(buffer=100_000)
            console = Console(file=io.StringIO(), force_terminal=True, width=200)
            session = engine.session(persist=False)
            async with LiveView(engine.bus, console, "live") as view:
                with streaming.watching():
                    sending = asyncio.create_task(session.send("Why is the sky blue?"))
                try:
                    row = await until(lambda: next((r for r in view.board.rows.values()
                                                    if r.name.startswith("writer") and r.writing), None),
                                      sending, cluster)
                    assert row.writing == "Sunlight " and row.action == "✎ Sunlight"  # the first word only
                    assert not sending.done()  # the model is still writing: the server holds the rest
                finally:
                    gate.set()
                outcome = await asyncio.wait_for(sending, 90)
            await until_every_run_ended(sub, seen)
            sub.close()
    assert outcome.reply.text_content() == f'the writer said: [{{"agent": "writer", "result": "{TEXT}"}}]'
    assert server.requests[0].body["stream"] is True
    writer = [e for e in seen if e.agent.startswith("writer")]
    replies = [e for e in writer if e.kind == "message_added" and e.data.get("role") == "assistant"]
    assert [e.data["text"] for e in replies] == [TEXT]  # the whole reply, once
    assert "".join(str(e.data["text"]) for e in writer if e.kind == "message_delta") == TEXT
    if runtime == "pool":  # the child's journaled chat holds the reply once, whole
        (run,) = [e.run_id for e in replies]
        journal = [json.loads(m) for m in cluster.redis.lrange(Keys(cluster.prefix).run_msgs(run), 0, -1)]
        said = [m for m in journal if m["role"] == "assistant"]
        assert [p["text"] for m in said for p in m["parts"] if p["kind"] == "text"] == [TEXT]


async def until(found: object, sending: asyncio.Task[object], cluster: Cluster) -> object:
    """Wait (60 s at most) until ``found()`` returns something; fail if the send ends first."""
    deadline = asyncio.get_running_loop().time() + 60
    while (value := found()) is None:  # type: ignore[operator]
        assert not sending.done(), f"the send ended first: {sending.exception() or sending.result()}"
        assert asyncio.get_running_loop().time() < deadline, f"no streamed text in time\n{cluster.worker_log()}"
        await asyncio.sleep(0.02)
    return value
