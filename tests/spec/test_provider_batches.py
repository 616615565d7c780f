"""Tiers in one tree, the same on both runtimes: an interactive lead (a scripted model) delegates to
two children whose provider sends its calls through a vendor's batch API (the loopback stand-in).
Both children's calls go in one provider batch, their replies come back from it at the batch price,
and the lead gets the same entries, events and tokens embedded and on the pool (DESIGN §6)."""

from __future__ import annotations

import pytest

from shelly_dist.testing.model_server import ModelServer, Reply

from .support import Cluster, Scenario, cluster, delegate, observe

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_batch_priced_children_of_an_interactive_lead_end_the_same_on_both_runtimes(
        cluster: Cluster, kind: str) -> None:
    done = Reply(text="", usage={"input": 200, "output": 20}, tool_calls=[
        {"name": "task_complete", "arguments": {"status": "completed", "summary": "wrote it"}}])
    with ModelServer(batch_delay=0.3, default=done) as server:
        batch = {"enabled": True, "collect_window": "1s", "poll_interval": "0.2s"}
        vendor = {"name": "vendor", "kind": kind, "model": "gpt-4o" if kind == "openai" else "claude-sonnet-4-5",
                  "base_url": server.url, "api_key": "k", "batch": {**batch, **({"api": "openai"} if kind == "openai"
                                                                              else {})}}
        scenario = Scenario(
            scripts={"lead": [delegate({"agent": "writer", "task": "one"}, {"agent": "writer", "task": "two"}),
                              "both written"]},
            agents=[{"name": "lead", "options": {"max_delegation_depth": 1}},
                    {"name": "writer", "provider": "vendor"}],
            providers=[vendor])
        embedded = await observe(cluster, scenario, "embedded")
        pool = await observe(cluster, scenario, "pool")
        assert embedded == pool
        assert embedded.reply == "both written" and embedded.endings == [("writer", "done"), ("writer", "done")]
        assert {"model_waiting", "batch_submitted", "batch_polling", "batch_completed"} <= embedded.kinds["writer"]
        assert [b["requests"] for b in server.batches.batches()] == [2, 2]  # one batch per runtime
        assert not [r for r in server.requests if r.path.endswith(("/chat/completions", "/messages"))]
