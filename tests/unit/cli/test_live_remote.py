"""The live view shows remote sub-agents: worker, depth, status and tokens from stream events."""

from __future__ import annotations

from shelly_dist import events
from shelly_dist.cli.live import Board
from shelly_dist.events import Event


def test_remote_run_events_fill_worker_depth_status_and_tokens():
    board = Board()
    started = board.apply(Event(kind=events.RUN_STARTED, agent="coder-fix-1", data={"worker": "w1@host", "depth": 1}))
    board.apply(Event(kind=events.MESSAGE_ADDED, agent="coder-fix-1",
                      data={"role": "assistant", "text": "", "tool_calls": ["delegate"],
                            "usage": {"input_tokens": 10, "output_tokens": 5}}))
    board.apply(Event(kind=events.RUN_WAITING, agent="coder-fix-1", data={"waiting_on": 2}))
    row = board.rows["coder-fix-1"]
    assert started == "  ▶ coder-fix-1 started on w1@host (depth 1)"
    assert (row.worker, row.depth, row.status, row.tokens) == ("w1@host", 1, "waiting", 15)
    board.apply(Event(kind=events.RUN_RESUMED, agent="coder-fix-1", data={"worker": "w2@host"}))
    assert (row.worker, row.status) == ("w2@host", "running")
    done = board.apply(Event(kind=events.RUN_FINISHED, agent="coder-fix-1",
                             data={"status": "done", "entry": {"agent": "coder", "result": "fixed"}}))
    assert row.status == "done" and done == "  ✔ coder-fix-1 done on w2@host (15 tokens)"


def test_canceled_remote_run_is_shown_as_canceled():
    board = Board()
    board.apply(Event(kind=events.RUN_STARTED, agent="w-a-1", data={"worker": "w1", "depth": 1}))
    line = board.apply(Event(kind=events.RUN_FINISHED, agent="w-a-1",
                             data={"status": "canceled", "entry": {"agent": "w", "error": "task canceled"}}))
    assert board.rows["w-a-1"].status == "canceled" and "✗ w-a-1 canceled" in line

