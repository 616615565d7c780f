"""Effects act on a child's steps the same way embedded and on the pool: what they rewrite, store
and stop gives the same entries, endings, event kinds and tokens. (A token budget's end is in
``test_delegation.py``.)"""

from __future__ import annotations

from typing import Any

import pytest

from .support import Cluster, Scenario, both, cluster, complete, delegate

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}
BIG = "B" * 1200


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}



async def test_an_offloaded_result_is_recalled_whole_the_same_way(cluster: Cluster) -> None:
    get = call("shared_state_get", key="k")
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "digger", "task": "dig"}), "noted"],
                 "digger": [call("shared_state_set", key="k", value=BIG), get, get, call("recall", id="call_1_0"),
                            complete("recalled {result}")]},
        agents=[LEAD, {"name": "digger", "toolboxes": ["state"], "effects": [
            {"kind": "offload", "params": {"threshold": 0.15, "min_result_len": 1000, "recent_window": 1}}]}],
        provider={"context_window": 4000})
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == f'recalled "{BIG}"'
    assert observed.endings == [("digger", "done")]


async def test_a_stalled_child_is_ended_by_stall_detect_the_same_way(cluster: Cluster) -> None:
    miss = call("shared_state_get", key="missing-" + "m" * 200)
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "digger", "task": "dig"}), "noted"], "digger": [miss] * 6},
        agents=[LEAD, {"name": "digger", "toolboxes": ["state"], "effects": [
            {"kind": "reflection", "params": {"failure_threshold": 2}},
            {"kind": "loop_detect", "params": {"threshold": 2}},
            {"kind": "stall_detect", "params": {"window": 2, "similarity_threshold": 0.5}}]}])
    observed = await both(cluster, scenario)
    assert "stall detected" in str(observed.entries[0][0])
    assert observed.endings == [("digger", "failed")]
