"""``ask_user`` behaves the same embedded and on the pool (Shelly: the question blocks until
``Session.Respond``): an engine opened without an answerer lists the question in
``Session.questions``, ``Session.respond`` answers it from outside the run, and
``options.question_timeout`` ends the wait with the same error result."""

from __future__ import annotations

from typing import Any

import pytest

from .support import Cluster, Scenario, both, cluster, complete, delegate

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1}}
OPTIONS = ["parser.py", "lexer.py"]


def ask(question: str, *options: str) -> dict[str, Any]:
    """A scripted reply calling ``ask_user``."""
    return {"tool_calls": [{"name": "ask_user", "arguments": {"question": question, "options": list(options)}}]}



async def test_the_top_level_runs_question_waits_for_session_respond_on_both(cluster: Cluster) -> None:
    scenario = Scenario(scripts={"lead": [ask("Which file?", *OPTIONS), "fixing {result}"]},
                        agents=[{"name": "lead"}], answers={"Which file?": "lexer.py"})
    observed = await both(cluster, scenario)
    assert observed.reply == "fixing lexer.py"
    assert observed.questions == [{"id": "q-1", "agent": "lead", "text": "Which file?", "options": OPTIONS,
                                   "timeout": 0.0}]
    assert observed.asked == [{"id": "q-1", "text": "Which file?", "options": OPTIONS}]


async def test_a_childs_question_waits_for_session_respond_and_its_entry_carries_the_answer_on_both(
        cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix it"}), "noted"],
                 "coder": [ask("Which file?", *OPTIONS), complete("fixed {result}")]},
        agents=[LEAD, {"name": "coder"}], answers={"Which file?": "parser.py"})
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == "fixed parser.py"
    assert [q["agent"] for q in observed.questions] == ["coder-fix-1"]  # the instance that asked
    assert "ask_user" in observed.kinds["coder"]


async def test_an_unanswered_top_level_question_times_out_with_the_same_error_result(cluster: Cluster) -> None:
    scenario = Scenario(scripts={"lead": [ask("Which file?"), "gave up: {result}"]},
                        agents=[{"name": "lead", "options": {"question_timeout": "1s"}}])
    observed = await both(cluster, scenario)
    assert observed.reply == "gave up: ask_user: no answer to q-1 within 1s (options.question_timeout)"


async def test_an_unanswered_childs_question_times_out_with_the_same_error_result(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [delegate({"agent": "coder", "task": "fix it"}), "noted"],
                 "coder": [ask("Which file?"), complete("gave up: {result}")]},
        agents=[LEAD, {"name": "coder", "options": {"question_timeout": "1s"}}])
    observed = await both(cluster, scenario)
    assert observed.entries[0][0]["result"] == (
        "gave up: ask_user: no answer to q-1 within 1s (options.question_timeout)")
    assert observed.endings == [("coder", "done")]
