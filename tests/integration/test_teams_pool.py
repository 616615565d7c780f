"""Teams on the pool: a team delegated to runs on a worker, each member turn is a run, and the
team suspends between rounds holding no worker — also when a team is a member of another."""

from __future__ import annotations

import json

import pytest

from .cluster import Cluster, delegate, scripted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_a_nested_team_on_a_one_slot_worker_suspends_between_rounds_and_replies(cluster: Cluster) -> None:
    """Had the team (or its inner team) held the only slot while a member ran, nothing could run."""
    cluster.write_config(
        [scripted(lead=[delegate(("house", "a piece on bees")), "lead done"],
                  researcher=["three facts"], writer=["a draft"], critic=["looks good"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "researcher"}, {"name": "writer"}, {"name": "critic"}],
        teams=[{"name": "drafting", "members": ["researcher", "writer"]},
               {"name": "house", "members": ["drafting", "critic"], "coordinator": {"kind": "sequential"}}],
        entry_agent="lead")
    cluster.start_worker("w1", concurrency=1)
    out = cluster.shelly("run", "go", "--json", timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    assert json.loads(out.stdout)["reply"] == "lead done"
    records = [r for r in cluster.redis.scan_iter(match=cluster.prefix + "run:*") if r.count(":") == 3]
    by_agent = {cluster.redis.hget(r, "agent"): r for r in records}
    house = by_agent["house"]
    assert json.loads(cluster.redis.hget(house, "result"))["result"] == "looks good"
    assert json.loads(cluster.redis.hget(by_agent["drafting"], "result"))["result"] == "a draft"
    assert cluster.redis.hget(house, "status") == "done"
