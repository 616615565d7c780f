"""Interactive delegation behaves the same embedded and on the pool: a child's ``request_input``
reaches the parent's model as a pending question, ``answer_delegation_questions`` answers it, a
child left waiting when its parent ends is cancelled, and ``options.question_timeout`` ends a round
with the same entry."""

from __future__ import annotations

from typing import Any

import pytest

from .support import Cluster, Scenario, both, cluster, complete, delegate

__all__ = ["cluster"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEAD = {"name": "lead", "options": {"max_delegation_depth": 1, "interaction_mode": "interactive"}}


def interactive(*agents: str) -> dict[str, Any]:
    """A scripted ``delegate`` call with every task interactive."""
    return delegate(*({"agent": a, "task": f"{a} task", "mode": "interactive"} for a in agents))


def answer(delegation_id: str, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "answer_delegation_questions",
                            "arguments": {"answers": [{"delegation_id": delegation_id, "answer": text}]}}]}


def ask_parent(question: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "request_input", "arguments": {"question": question}}]}



async def test_a_childs_question_reaches_the_parent_and_its_answer_the_child_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [interactive("asker", "quick"), answer("d-1", "blue"), "lead done"],
                 "asker": [ask_parent("Which colour?"), complete("painted {result}")], "quick": ["done fast"]},
        agents=[LEAD, {"name": "asker"}, {"name": "quick"}])
    observed = await both(cluster, scenario)
    asked, answered = observed.entries
    assert asked == [{"agent": "asker", "delegation_id": "d-1",
                      "pending_question": {"id": "q-1", "agent": "asker-asker-1", "content": "Which colour?"}},
                     {"agent": "quick", "result": "done fast"}]
    assert answered == [{"agent": "asker", "result": "painted blue",
                         "completion": {"status": "completed", "summary": "painted blue"}}]
    assert observed.endings == [("asker", "done"), ("quick", "done")]


async def test_a_child_still_waiting_when_its_parent_ends_is_cancelled_the_same_way(cluster: Cluster) -> None:
    scenario = Scenario(
        scripts={"lead": [interactive("asker"), "not answering"],
                 "asker": [ask_parent("Which colour?"), complete("never")]},
        agents=[LEAD, {"name": "asker"}])
    observed = await both(cluster, scenario)
    assert observed.reply == "not answering"
    assert observed.endings == [("asker", "canceled")]


async def test_a_child_that_neither_asks_nor_ends_within_question_timeout_is_the_same_entry_error(
        cluster: Cluster) -> None:
    slow_user = {"tool_calls": [{"name": "ask_user", "arguments": {"question": "Colour?"}}]}
    scenario = Scenario(
        scripts={"lead": [interactive("slowpoke"), "lead done"], "slowpoke": [slow_user, complete("never")]},
        agents=[{**LEAD, "options": {**LEAD["options"], "question_timeout": "1s"}}, {"name": "slowpoke"}])
    observed = await both(cluster, scenario)
    assert observed.entries == [[{"agent": "slowpoke", "error": "question timeout (1s) exceeded for delegation d-1"}]]
    assert observed.endings == [("slowpoke", "canceled")]
