"""``request_input`` on the pool (behaviour 51 on real workers): a child on a worker gets the
blocking-delegation auto-answer from its delegation context; a handoff peer from the handoff's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist.redisio.keys import Keys

from .cluster import Cluster, complete, scripted
from .test_handoff import delegate_all, handoff, run_json

pytestmark = pytest.mark.integration


def ask_parent(question: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "request_input", "arguments": {"question": question}}]}


def answers(cluster: Cluster, session: str, agent: str) -> list[str]:
    run = next(r for r in cluster.runs(session) if r["agent"] == agent)
    msgs = [json.loads(m) for m in cluster.redis.lrange(Keys(cluster.prefix).run_msgs(run["id"]), 0, -1)]
    return [p["content"] for m in msgs if m["role"] == "tool" for p in m["parts"]]


def test_a_child_on_a_worker_gets_its_delegation_context_as_the_answer(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[delegate_all(("coder", "fix it")), "lead done"],
                  coder=[ask_parent("Which DB?"), complete("fixed")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "coder"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    assert answers(cluster, out["session"], "coder")[0] == (
        'Based on the delegation context for your question "Which DB?":\n\noriginal ctx')


def test_a_handoff_peer_on_a_worker_gets_the_handoff_context_as_the_answer(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[delegate_all(("planner", "fix it")), "lead done"],
                  planner=[handoff("coder", context="handoff ctx")],
                  coder=[ask_parent("What now?"), complete("fixed")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "planner", "options": {"max_handoffs": 1}}, {"name": "coder"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go")
    answer = answers(cluster, out["session"], "coder")[0]
    assert answer == 'Based on the delegation context for your question "What now?":\n\nhandoff ctx'
