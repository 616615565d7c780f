"""A run's status is how it ended (``Ending``) or one of three live states: one vocabulary."""

from __future__ import annotations

from shelly_dist.agent.children import Ending
from shelly_dist.runtime.celery.journal.record import LIVE, TERMINAL, RunStatus


def test_a_runs_status_is_an_ending_or_queued_running_or_waiting():
    assert {str(s) for s in RunStatus} == {str(e) for e in Ending} | {"queued", "running", "waiting"}
    assert {str(s) for s in LIVE} == {"queued", "running", "waiting"}


def test_the_terminal_statuses_are_exactly_the_endings():
    assert TERMINAL == {RunStatus.ended(e) for e in Ending} == {"done", "failed", "canceled"}
    assert TERMINAL.isdisjoint(LIVE)
