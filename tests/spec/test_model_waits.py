"""A model call that must wait (``SuspendModel``: the provider governor's, a vendor batch's) behaves
the same embedded and on the pool: the child's run waits, is asked again when due, and ends with the
same entry, events and tokens (DESIGN §6). Each scenario runs on both runtimes."""

from __future__ import annotations

import pytest

from .support import Cluster, Scenario, cluster, delegate, observe

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_children_whose_model_calls_wait_end_the_same_on_both_runtimes(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "one"}, {"agent": "coder", "task": "two"}),
                          "both waited"],
                 "coder": [{"text": "thinking", "suspend": 1.5, "tool_calls": [
                     {"name": "task_complete", "arguments": {"status": "completed", "summary": "did {task}"}}]}]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "coder"}])
    embedded = await observe(cluster, scenario, "embedded")
    pool = await observe(cluster, scenario, "pool")
    assert embedded == pool
    assert embedded.endings == [("coder", "done"), ("coder", "done")]
    assert "model_waiting" in embedded.kinds["coder"]
    assert [e["completion"]["summary"] for e in embedded.entries[0]] == ["did one", "did two"]
