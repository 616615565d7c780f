"""A verdict as the answer channels carry it: its JSON round-trips, and a person's words parse."""

from __future__ import annotations

import pytest

from shelly_dist.tools.decisions import Approval, Verdict, check_arguments, path_text, rejected_text


@pytest.mark.parametrize(("typed", "decision", "reason", "always"), [
    ("yes", "approve", "", False), ("Y", "approve", "", False), ("always", "approve", "", True),
    ("no", "reject", "", False), ("no, not on Fridays", "reject", "not on Fridays", False),
    ("reject: too risky", "reject", "too risky", False),
])
def test_a_persons_words_parse_into_a_verdict(typed: str, decision: str, reason: str, always: bool) -> None:
    verdict = Verdict.parse(typed, by="terminal")
    assert (verdict.decision, verdict.reason, verdict.always, verdict.by) == (decision, reason, always, "terminal")


def test_anything_else_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"answer approve \(yes, always\) or reject \(no \[reason\]\), not 'maybe'"):
        Verdict.parse("maybe")


def test_a_verdicts_text_round_trips_and_keeps_its_own_author() -> None:
    verdict = Verdict.approve(arguments='{"env": "staging"}', by="alice", always=True)
    assert Verdict.parse(verdict.to_text(), by="other") == verdict


def test_edited_arguments_must_be_a_json_object() -> None:
    assert check_arguments('{"a": 1}') == '{"a": 1}'
    with pytest.raises(ValueError, match="must be a JSON object"):
        check_arguments("[1]")
    with pytest.raises(ValueError, match="not JSON"):
        check_arguments("{")


def test_what_a_person_reads() -> None:
    approval = Approval(tool="deploy", arguments='{"env": "prod"}', path=["lead", "deployer-1"])
    assert approval.prompt() == 'lead → deployer-1 wants to run deploy {"env": "prod"}'
    assert path_text(approval.path) == "lead → deployer-1"
    assert rejected_text("deploy", "") == "deploy: rejected: the user rejected this call"
