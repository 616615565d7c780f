"""What each ``shelly batch`` item cost, on a pool: its output line carries its whole tree's usage
(tokens, ``cost_usd``, model requests: the root's and every child's), and the batch's last line on
stderr totals them (real Redis, a real ``shelly worker``)."""

from __future__ import annotations

import json

import pytest

from .cluster import Cluster, complete, delegate, scripted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PRICE = 2.0
"""USD per million tokens of every kind: the scripted model priced by the config's ``pricing:``."""


def test_each_items_line_carries_its_trees_usage_and_the_summary_totals_them(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "part one"), ("helper", "part two")), "both parts done"],
                  helper=[complete("did {task}")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}],
        entry_agent="lead",
        pricing=[{"provider": "scripted", "prefix": "script", "input": PRICE, "output": PRICE,
                  "cache_read": PRICE, "cache_creation": PRICE}],
    )
    (cluster.root / "in.jsonl").write_text("\n".join(json.dumps({"id": f"i{i}", "task": f"job {i}"})
                                                     for i in range(3)) + "\n")
    cluster.start_worker("w1")
    out = cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    lines = [json.loads(line) for line in (cluster.root / "out.jsonl").read_text().splitlines()]
    assert len(lines) == 3
    total_tokens, total_cost = 0, 0.0
    for line in lines:
        usage = line["usage"]
        assert usage["model_requests"] == 4  # the lead's two calls and one per helper
        tokens = usage["input_tokens"] + usage["output_tokens"]
        assert tokens > 0 and usage["cost_usd"] == pytest.approx(tokens * PRICE / 1_000_000)
        total_tokens += tokens
        total_cost += usage["cost_usd"]
    summary = out.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"batch: 3 items, {total_tokens:,} tokens ")
    assert summary.endswith(f", ${total_cost:.4f}, 12 model requests")
