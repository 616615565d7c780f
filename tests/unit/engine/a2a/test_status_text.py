"""The working-status lines an A2A task shows for its run's events."""

from __future__ import annotations

from shelly_dist import events
from shelly_dist.engine.a2a.executor import status_text
from shelly_dist.events import Event


def test_the_tasks_own_run_start_adds_no_line_to_agent_start() -> None:
    event = Event(kind=events.RUN_STARTED, agent="lead", data={"worker": "", "depth": 0, "parent": ""})
    assert status_text(event) is None


def test_a_child_started_in_this_process_names_no_empty_worker() -> None:
    event = Event(kind=events.RUN_STARTED, agent="coder-1", data={"worker": "", "depth": 1, "parent": "r1"})
    assert status_text(event) == "coder-1 started"


def test_a_child_started_on_a_worker_names_it() -> None:
    event = Event(kind=events.RUN_STARTED, agent="coder-1", data={"worker": "w1@h", "depth": 1, "parent": "r1"})
    assert status_text(event) == "coder-1 started on w1@h"
