"""``shelly decisions``/``approve``/``reject``/``steer``: a bad command line is one line naming what
to pass (exit 2) before anything is opened; a decision reads on one line; the live view shows
people in the loop."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from shelly_dist import events
from shelly_dist.cli.decisions import approve_command, line, reject_command, steer_command
from shelly_dist.cli.live import Board
from shelly_dist.events import Event


@pytest.mark.parametrize(("command", "args", "said"), [
    (approve_command, [], "approve: give the decision id (see `shelly decisions`) or --all"),
    (approve_command, ["a-1"], "approve: --session is required with a decision id"),
    (approve_command, ["a-1", "--all"], "approve: give a decision id or --all, not both"),
    (approve_command, ["--all", "--args", "{}"], "approve: --args edits one call: give a decision id, not --all"),
    (approve_command, ["--session", "s", "a-1", "--tool", "x"], "approve: --tool and --batch filter --all"),
    (reject_command, [], "reject: give the decision id (see `shelly decisions`) or --all"),
    (steer_command, ["--session", "s", "--agent", "a", "--run", "r", "hi"], "steer: give --agent or --run, not both"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(command: object, args: list[str], said: str) -> None:
    out = CliRunner().invoke(command, args)  # type: ignore[arg-type]
    assert out.exit_code == 2
    assert out.output.strip().splitlines()[-1] == f"shelly: {said}"


def test_a_decision_reads_on_one_line() -> None:
    now = time.time()
    approval = {"id": "a-3", "kind": "approval", "session": "s1", "path": ["lead", "deployer-1"], "agent": "deployer-1",
                "tool": "deploy", "arguments": {"env": "prod"}, "asked": now - 30, "times_out": now + 270}
    assert line(approval).startswith('a-3  approval  session=s1  lead → deployer-1  deploy {"env": "prod"}  asked 3')
    assert "times out in 2" in line(approval)
    question = {"id": "q-1", "kind": "question", "session": "s1", "path": ["lead"], "agent": "lead",
                "text": "Which file?", "options": ["a.py", "b.py"], "asked": now, "times_out": None}
    assert line(question) == "q-1  question  session=s1  lead  Which file?  [a.py / b.py]  asked 0s ago"


def test_the_live_view_shows_an_approval_asked_and_decided_and_a_steering_message() -> None:
    board = Board()
    asked = board.apply(Event(kind=events.APPROVAL_REQUESTED, agent="deployer-1", data={
        "id": "a-1", "tool": "deploy", "arguments": {"env": "prod"}, "path": ["lead", "deployer-1"]}))
    assert asked == '? lead → deployer-1 asks to run deploy {"env": "prod"} (approval a-1)'
    assert board.rows["deployer-1"].status == "waiting"
    decided = board.apply(Event(kind=events.APPROVAL_DECIDED, agent="deployer-1", data={
        "id": "a-1", "tool": "deploy", "decision": "reject", "by": "cli:ana@h", "reason": "frozen"}))
    assert decided == "  deployer-1: deploy rejected by cli:ana@h: frozen"
    heard = board.apply(Event(kind=events.STEERED, agent="lead", data={"text": "use staging", "by": "cli:ana@h",
                                                                        "interrupt": True}))
    assert heard == "» lead heard (cli:ana@h) [interrupt]: use staging"


def test_edited_arguments_that_are_not_a_json_object_are_refused_before_anything_opens() -> None:
    out = CliRunner().invoke(approve_command, ["--session", "s", "a-1", "--args", "[1]"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines()[-1] == "shelly: approve: --args: the arguments must be a JSON object"
