"""``shelly state`` and ``shelly tasks`` against the real Redis (and their refusal without it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli.conftest import write_config

SESSION = "0123456789abcdef"


@pytest.fixture
def redis_config(workdir: Path, redis_url: str, key_prefix: str) -> Path:
    return write_config(workdir, distributed={"redis_url": redis_url, "key_prefix": key_prefix})


def test_state_without_a_shared_backend_exits_2(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("state", "list", "--session", SESSION)
    assert result.exit_code == 2 and "shared backend is needed" in result.stderr


def test_tasks_without_a_shared_backend_exits_2(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    assert invoke("tasks", "list", "--session", SESSION).exit_code == 2


def test_state_set_get_list_delete_round_trip(invoke, redis_config: Path) -> None:  # type: ignore[no-untyped-def]
    assert invoke("state", "set", "plan", '{"steps": 2}', "--session", SESSION).exit_code == 0
    got = json.loads(invoke("state", "get", "plan", "--session", SESSION).stdout)
    assert (got["key"], got["value"], got["version"]) == ("plan", {"steps": 2}, 1)
    invoke("state", "set", "note", "plain text", "--session", SESSION)
    listed = json.loads(invoke("state", "list", "--session", SESSION).stdout)
    assert listed == {"note": "plain text", "plan": {"steps": 2}}
    assert json.loads(invoke("state", "delete", "plan", "--session", SESSION).stdout)["deleted"] is True
    missing = invoke("state", "get", "plan", "--session", SESSION)
    assert missing.exit_code == 1 and "not found" in missing.stderr


def test_state_watch_returns_an_existing_key(invoke, redis_config: Path) -> None:  # type: ignore[no-untyped-def]
    invoke("state", "set", "ready", "true", "--session", SESSION)
    result = invoke("state", "watch", "ready", "--timeout", "5", "--session", SESSION)
    assert json.loads(result.stdout)["value"] is True


def test_tasks_create_claim_update_get_list(invoke, redis_config: Path) -> None:  # type: ignore[no-untyped-def]
    created = json.loads(invoke("tasks", "create", "write docs", "--session", SESSION).stdout)
    tid = created["id"]
    assert created["status"] == "pending"
    claimed = json.loads(invoke("tasks", "claim", tid, "--agent", "bob", "--session", SESSION).stdout)
    assert (claimed["status"], claimed["assignee"]) == ("in_progress", "bob")
    invoke("tasks", "update", tid, "--status", "completed", "--session", SESSION)
    assert json.loads(invoke("tasks", "get", tid, "--session", SESSION).stdout)["status"] == "completed"
    listed = json.loads(invoke("tasks", "list", "--status", "completed", "--session", SESSION).stdout)
    assert [t["id"] for t in listed] == [tid]
    watched = json.loads(invoke("tasks", "watch", tid, "--timeout", "5", "--session", SESSION).stdout)
    assert watched["status"] == "completed"


def test_tasks_cancel_and_errors_exit_1(invoke, redis_config: Path) -> None:  # type: ignore[no-untyped-def]
    tid = json.loads(invoke("tasks", "create", "t", "--session", SESSION).stdout)["id"]
    assert json.loads(invoke("tasks", "cancel", tid, "--session", SESSION).stdout)["status"] == "canceled"
    again = invoke("tasks", "cancel", tid, "--session", SESSION)
    assert again.exit_code == 1 and again.stderr.startswith("shelly: ")
