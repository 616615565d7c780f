"""The Redis key layout of DESIGN.md §3, mirrored by ``Keys``."""

from __future__ import annotations

import pytest

from shelly_dist.errors import UsageError
from shelly_dist.state import Keys


def test_default_layout_matches_the_design() -> None:
    keys = Keys()
    assert keys.state("s1") == "shelly:s:s1:state"
    assert keys.tasks("s1") == "shelly:s:s1:tasks"
    assert keys.events("s1") == "shelly:s:s1:events"
    assert keys.run("r1") == "shelly:run:r1"
    assert keys.run_msgs("r1") == "shelly:run:r1:msgs"
    assert keys.run_children("r1") == "shelly:run:r1:children"
    assert keys.state_changed("s1") == "shelly:s:s1:state:changed"
    assert keys.tasks_changed("s1") == "shelly:s:s1:tasks:changed"
    assert keys.run_changed("r1") == "shelly:run:r1:changed"


def test_a_prefix_without_colon_gets_one() -> None:
    assert Keys("acme").state("s") == "acme:s:s:state"
    assert Keys("acme:") == Keys("acme")


@pytest.mark.parametrize("session", ["", "a b"])
def test_an_empty_or_spaced_session_is_a_usage_error(session: str) -> None:
    with pytest.raises(UsageError, match="invalid session"):
        Keys().state(session)
