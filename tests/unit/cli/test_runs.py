"""``shelly runs``: each run's own spending and its subtree's, summed from the run records."""

from __future__ import annotations

import json

import pytest

from shelly_dist.cli.runs import runs_json, tree_lines
from shelly_dist.models import Usage
from shelly_dist.runtime.celery.journal import RunRecord


def record(rid: str, parent: str = "", *, tokens: int = 0, cost: float = 0.0, requests: int = 0,
           finished: bool = True, spawned: bool = False) -> RunRecord:
    usage = Usage(input_tokens=tokens, cost_usd=cost, model_requests=requests).model_dump_json()
    rec = {"id": rid, "parent": parent, "root": "a", "agent": rid, "status": "done" if finished else "running"}
    if spawned:
        rec["spawned"] = "1"
    if finished:
        rec["usage"] = usage
    else:
        rec["state"] = json.dumps({"usage": json.loads(usage), "iteration": requests})
    return RunRecord.parse(rec)


def test_a_subtree_sums_every_descendant_and_a_running_run_counts_its_checkpointed_usage() -> None:
    rows = {r["id"]: r for r in runs_json([
        record("a", tokens=10, cost=0.1, requests=2),
        record("b", "a", tokens=20, cost=0.2, requests=3),
        record("c", "b", tokens=5, cost=0.05, requests=1, finished=False),
        record("d", "a", tokens=1, cost=0.0, requests=1),
    ])}
    assert rows["a"]["own"] == {"total_tokens": 10, "cost_usd": 0.1, "model_requests": 2}
    assert rows["a"]["tree"] == {"total_tokens": 36, "cost_usd": pytest.approx(0.35), "model_requests": 7}
    assert rows["b"]["tree"] == {"total_tokens": 25, "cost_usd": pytest.approx(0.25), "model_requests": 4}
    assert rows["c"]["own"] == rows["c"]["tree"] == {"total_tokens": 5, "cost_usd": 0.05, "model_requests": 1}


def test_a_spawned_run_is_shown_under_its_parent_marked_spawned() -> None:
    records = [record("a", tokens=1), record("a-1", "a", spawned=True), record("a-2", "a")]
    lines = tree_lines(records)
    assert lines[1].startswith("  a-1  a-1  done") and lines[1].endswith("(spawned)")
    assert not lines[2].endswith("(spawned)")
    assert [r["spawned"] for r in runs_json(records)] == [False, True, False]


def test_a_run_waiting_for_a_provider_batch_says_which_vendor_batch() -> None:
    waiting = RunRecord.parse({"id": "a", "root": "a", "agent": "writer", "status": "waiting",
                               "waiting_for": "openai batch batch_abc (37 requests)"})
    assert tree_lines([waiting])[0].endswith("waiting for openai batch batch_abc (37 requests)")
    assert runs_json([waiting])[0]["waiting_for"] == "openai batch batch_abc (37 requests)"
    done = RunRecord.parse({"id": "a", "root": "a", "agent": "writer", "status": "done",
                            "waiting_for": "openai batch batch_abc (37 requests)"})
    assert "waiting for" not in tree_lines([done])[0] and runs_json([done])[0]["waiting_for"] == ""
