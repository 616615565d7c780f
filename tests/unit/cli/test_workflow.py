"""``shelly workflow run`` embedded, through CliRunner (the pool's are in tests/integration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.cli.conftest import write_config

REVIEW = {
    "coder": [{"tool_calls": [{"name": "channel_send", "arguments": {"message": "@reviewer patch ready"}}]},
              "patch written"],
    "reviewer": [{"tool_calls": [{"name": "team_doc_write", "arguments": {"content": "review: approved"}}]},
                 "approved"],
}


def write_team(workdir: Path, script: dict[str, list[Any]], kickoff: str = "@coder fix the parser") -> Path:
    write_config(workdir, script, agents=[{"name": "coder", "toolboxes": ["team"]}, {"name": "reviewer"}])
    path = workdir / "review.yaml"
    path.write_text(yaml.safe_dump({"name": "review", "kickoff": kickoff,
                                    "agents": {"coder": {"ref": "coder"}, "reviewer": {"ref": "reviewer"}}}))
    return path


def test_a_review_workflow_runs_to_idle_and_prints_the_document(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke("workflow", "run", str(write_team(workdir, REVIEW)))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "review: approved"
    assert result.stderr.startswith("session ")
    assert "⏰ coder woken for 1 message(s)" in result.stderr and "#2 @coder: @reviewer patch ready" in result.stderr
    assert "✔ reviewer wake done" in result.stderr


def test_the_kickoff_post_is_shown_after_the_session_line_as_on_the_pool(  # type: ignore[no-untyped-def]
        invoke, workdir: Path) -> None:
    result = invoke("workflow", "run", str(write_team(workdir, REVIEW)))
    lines = result.stderr.splitlines()
    assert lines[0].startswith("session ") and lines[1] == "  #1 @user: @coder fix the parser", result.stderr


def test_quiet_prints_no_progress(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke("workflow", "run", "--quiet", str(write_team(workdir, REVIEW)))
    assert result.exit_code == 0 and "woken" not in result.stderr


def test_without_a_document_the_last_agent_word_is_printed(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke("workflow", "run", str(write_team(workdir, {"coder": ["all fixed"], "reviewer": ["-"]})))
    assert result.exit_code == 0 and result.stdout.strip() == "all fixed"


def test_a_dead_lettered_wake_exits_1_and_says_which(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    failing = {"coder": [{"error": "model down"}], "reviewer": ["-"]}
    result = invoke("workflow", "run", str(write_team(workdir, failing)))
    assert result.exit_code == 1
    assert "dead letter: coder messages 1..1 after 3 attempts" in result.stderr and "model down" in result.stderr


def test_a_missing_required_param_is_a_usage_error(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["x"]})
    path = workdir / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "agents": {"solo": {"ref": "solo"}},
                                    "params": [{"name": "target", "required": True}], "kickoff": "@solo go"}))
    result = invoke("workflow", "run", str(path))
    assert result.exit_code == 2 and "parameter 'target' is required" in result.stderr


PING_PONG = {"a": ["@b ping"] * 100, "b": ["@a pong"] * 100}


def write_ping_pong(workdir: Path, budget: dict[str, int]) -> Path:
    """Two agents whose every reply @mentions the other: each wake wakes the other, forever."""
    write_config(workdir, PING_PONG, agents=[{"name": "a"}, {"name": "b"}])
    path = workdir / "pingpong.yaml"
    path.write_text(yaml.safe_dump({"name": "pingpong", "kickoff": "@a start", "wake_budget": budget,
                                    "agents": {"a": {"ref": "a"}, "b": {"ref": "b"}}}))
    return path


def test_agents_mentioning_each_other_stop_at_the_wake_budget_with_a_clear_message(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke("workflow", "run", str(write_ping_pong(workdir, {"total": 10, "loop_rounds": 0})))
    assert result.exit_code == 1
    assert result.stderr.count(" woken for ") == 10
    assert "⏸ wakes paused: the session's wake budget is spent (10 wakes in all)" in result.stderr
    assert "workflow paused: the session's wake budget is spent (10 wakes in all) (raise wake_budget in" \
        in result.stderr


def test_a_ping_pong_between_two_agents_is_detected_as_a_loop(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke("workflow", "run", str(write_ping_pong(workdir, {"loop_rounds": 3})))
    assert result.exit_code == 1
    assert result.stderr.count(" woken for ") == 6
    assert "wakes paused: a loop: a and b woke only each other 3 rounds running, with nothing from the user" \
        in result.stderr
