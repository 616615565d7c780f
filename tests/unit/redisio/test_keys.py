"""The Redis key layout of DESIGN.md §3, mirrored by ``Keys``."""

from __future__ import annotations

import pytest

from shelly_dist.errors import UsageError
from shelly_dist.redisio.keys import Keys


def test_default_layout_matches_the_design() -> None:
    keys = Keys()
    assert keys.state("s1") == "shelly:s:{s1}:state"
    assert keys.tasks("s1") == "shelly:s:{s1}:tasks"
    assert keys.events("s1") == "shelly:s:{s1}:events"
    assert keys.run("r1") == "shelly:run:{r1}"
    assert keys.run_msgs("r1") == "shelly:run:{r1}:msgs"
    assert keys.run_children("r1") == "shelly:run:{r1}:children"
    assert keys.state_changed("s1") == "shelly:s:{s1}:state:changed"
    assert keys.tasks_changed("s1") == "shelly:s:{s1}:tasks:changed"
    assert keys.run_changed("r1") == "shelly:run:{r1}:changed"


def test_a_prefix_without_colon_gets_one() -> None:
    assert Keys("acme").state("s") == "acme:s:{s}:state"
    assert Keys("acme:") == Keys("acme")


@pytest.mark.parametrize("session", ["", "a b"])
def test_an_empty_or_spaced_session_is_a_usage_error(session: str) -> None:
    with pytest.raises(UsageError, match="invalid session"):
        Keys().state(session)


def test_every_key_of_a_run_tree_shares_the_root_ids_hash_tag() -> None:
    keys = Keys()
    child = "r1a2-0011aabb"
    grandchild = f"{child}-ccddeeff"
    assert keys.run(child) == "shelly:run:{r1a2}-0011aabb"
    assert keys.run_msgs(grandchild) == "shelly:run:{r1a2}-0011aabb-ccddeeff:msgs"
    assert keys.tree_deadlines("r1a2") == "shelly:run:{r1a2}:deadlines"


def test_every_key_of_a_session_shares_the_sessions_hash_tag() -> None:
    keys = Keys()
    assert keys.session_runs("s-1") == "shelly:s:{s-1}:runs"
    assert keys.instance_counter("s-1", "dev") == "shelly:s:{s-1}:n:dev"


@pytest.mark.parametrize("bad", ["a{b", "c}", "-lead"])
def test_a_run_id_with_braces_or_without_a_tree_tag_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match="invalid run id"):
        Keys().run(bad)


def test_a_prefix_with_braces_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="invalid prefix"):
        Keys("a{b}:")


def test_every_workspace_key_shares_the_sessions_hash_tag() -> None:
    keys = Keys()
    assert keys.workspace("s1", "channel") == "shelly:s:{s1}:ws:channel"
    assert keys.workspace_wake("s1", "coder") == "shelly:s:{s1}:ws:wake:coder"
