"""Reflections (SHELLY_BEHAVIOURS §1.6.8): a note per failed child, and the relevant notes of
earlier failures given to the next child with a similar task, before its task."""

from __future__ import annotations

from datetime import UTC, datetime

from shelly_dist import Role
from shelly_dist.agent.records import CompletionResult
from shelly_dist.agent.reflections import (
    MAX_BYTES,
    MemoryReflectionStore,
    prior_reflections,
    relevant,
    render,
)

from .helpers import Team, complete, delegate

TASK = "refactor authentication middleware module"


def _team(store: MemoryReflectionStore, *worker_replies: dict) -> Team:
    """A lead that delegates TASK once per worker reply, to a worker answering with them in turn."""
    team = Team()
    team.add("lead", [*(delegate({"agent": "worker", "task": TASK}) for _ in worker_replies), "ok"],
             max_delegation_depth=1, reflections=store)
    team.add("worker", list(worker_replies))
    return team


async def test_a_failed_child_leaves_a_note_with_its_task_summary_caveats_and_files():
    store = MemoryReflectionStore()
    team = _team(store, complete("could not parse config", status="failed", caveats="config.go is generated",
                                 files_modified=["a.go", "b.go"]))
    await team.spawn("lead").run("go")
    ((name, text),) = store.notes
    assert name.startswith("worker-") and name.endswith(".md")
    assert text.startswith("# Reflection: worker\n\n**Timestamp**: ")
    assert (f"## Task\n{TASK}\n\n## Summary\ncould not parse config\n\n## Caveats\nconfig.go is generated\n\n"
            "## Files Modified\n- a.go\n- b.go\n\n") in text


async def test_a_completed_child_leaves_no_note():
    store = MemoryReflectionStore()
    await _team(store, complete("done")).spawn("lead").run("go")
    assert store.notes == []


async def test_the_next_child_with_a_similar_task_gets_the_prior_reflections_before_its_task():
    store = MemoryReflectionStore()
    team = _team(store, complete("timed out on the middleware", status="failed"), complete("done"))
    await team.spawn("lead").run("go")
    first, second = (r.messages for r in team.requests("worker"))
    assert not any("<prior_reflections>" in m.text_content() for m in first)
    users = [m.text_content() for m in second if m.role == Role.USER]
    assert users[-1] == TASK
    assert users[-2].startswith("\n<prior_reflections>\nPrevious attempts at similar tasks failed.")
    assert "timed out on the middleware" in users[-2] and users[-2].endswith("\n---\n</prior_reflections>")


async def test_the_children_of_one_delegate_call_are_searched_with_one_read_of_the_store():
    class Counting(MemoryReflectionStore):
        reads = 0

        async def newest(self, limit: int) -> list[str]:
            Counting.reads += 1
            return await super().newest(limit)

    store = Counting()
    team = Team()
    team.add("lead", [delegate(*({"agent": "worker", "task": f"{TASK} {i}"} for i in range(3))), "ok"],
             max_delegation_depth=1, reflections=store)
    team.add("worker", [complete("done")] * 3)
    await team.spawn("lead").run("go")
    assert Counting.reads == 1


def test_a_note_is_relevant_when_two_words_of_four_characters_of_the_task_appear_in_it():
    assert relevant("fix the Auth middleware", "AUTH broke the MIDDLEWARE")
    assert not relevant("fix the auth middleware", "middleware only; fix the bug")  # "fix", "the" are short


def test_prior_reflections_are_the_newest_relevant_five():
    notes = [f"note {i}: auth middleware" for i in range(8)]
    text = prior_reflections("auth middleware", ["unrelated", *notes])
    assert [f"note {i}:" in text for i in range(8)] == [True] * 5 + [False] * 3


def test_prior_reflections_stop_once_32_kb_are_taken():
    big = "auth middleware " + "x" * MAX_BYTES
    text = prior_reflections("auth middleware", [big, "auth middleware small"])
    assert big in text and "small" not in text
    assert prior_reflections("auth middleware", ["nothing here"]) == ""


def test_the_note_file_name_is_the_sanitized_agent_and_timestamp():
    name, _ = render("team/lead", "t", CompletionResult(status="failed", summary="s"),
                     datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert name == "team-lead-20260102-030405.md"


async def test_a_child_out_of_iterations_leaves_a_note_of_shellys_synthetic_failure():
    store = MemoryReflectionStore()
    team = Team()
    team.add("lead", [delegate({"agent": "worker", "task": TASK}), "ok"], max_delegation_depth=1, reflections=store)
    team.add("worker", [{"tool_calls": [{"name": "list_agents", "arguments": {}}]}], repeat_last=True,
             max_iterations=1)
    await team.spawn("lead").run("go")
    ((_, text),) = store.notes
    assert "## Summary\nAgent \"worker-" in text and "exhausted its iteration budget (1 iterations)" in text
