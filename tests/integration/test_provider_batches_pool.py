"""Provider batches on a worker pool: model calls go to the vendors' batch APIs (the strict stand-in),
their runs wait holding no worker slot, and every reply comes back once, at the batch price."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist.testing.model_server import ModelServer, Reply

from .cluster import Cluster
from .test_batch_pool import output_lines, roots

pytestmark = pytest.mark.integration

USAGE = {"input": 1000, "output": 100}
DIRECT_COST = (1000 * 2.5 + 100 * 10.0) / 1e6
"""gpt-4o at the default table's price: what one call costs interactively."""


def batch_team(cluster: Cluster, server: ModelServer, kind: str = "openai", **batch: Any) -> None:
    model = "gpt-4o" if kind == "openai" else "claude-sonnet-4-5"
    settings = {"enabled": True, "collect_window": "1s", "poll_interval": "0.5s", **batch}
    if kind == "openai":
        settings.setdefault("api", "openai")
    cluster.write_config(
        [{"name": "vendor", "kind": kind, "model": model, "base_url": server.url, "api_key": "k",
          "rate_limit": {"max_retries": 0}, "batch": settings}],
        [{"name": "solver", "provider": "vendor"}],
    )


def items(cluster: Cluster, n: int) -> None:
    lines = [json.dumps({"id": f"item {i}", "task": f"question {i}"}) for i in range(n)]
    (cluster.root / "in.jsonl").write_text("\n".join(lines) + "\n")


def direct_calls(server: ModelServer) -> list[Any]:
    return [r for r in server.requests if r.path.endswith(("/chat/completions", "/messages"))]


def run_batch(cluster: Cluster, n: int, *args: str) -> list[dict[str, Any]]:
    items(cluster, n)
    done = cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet",
                          "--concurrency", str(n), *args, timeout=240)
    assert done.returncode == 0, done.stderr + cluster.worker_log()
    return output_lines(cluster)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_sixty_items_on_eight_slots_are_all_answered_from_provider_batches_each_request_sent_once(
        cluster: Cluster, kind: str) -> None:
    with ModelServer(batch_delay=1.0, default=Reply(text="the answer", usage=USAGE)) as server:
        batch_team(cluster, server, kind)
        cluster.start_workers("w1", "w2", concurrency=4)
        lines = run_batch(cluster, 60)
        assert len(lines) == 60 and {line["status"] for line in lines} == {"completed"}
        assert {line["reply"] for line in lines} == {"the answer"}
        assert direct_calls(server) == []
        assert len(server.batches.submitted) == 60 and set(server.batches.submitted.values()) == {1}
        assert max(b["requests"] for b in server.batches.batches()) > 8  # more than the pool's slots
        costs = {round(json.loads(r["usage"])["cost_usd"], 9) for r in roots(cluster)}
        if kind == "openai":
            assert costs == {round(DIRECT_COST / 2, 9)}
