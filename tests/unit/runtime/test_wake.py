"""The two halves of a wake, shared by both runtimes: begin (lease, mark, prompt) and end."""

from __future__ import annotations

import pytest

from shelly_dist.runtime.wake import WakeSettings, begin_wake, end_wake
from shelly_dist.workspace import USER, MemoryWorkspace

FAST = WakeSettings(attempts=3, backoff=0.5)


@pytest.fixture
async def ws() -> MemoryWorkspace:
    workspace = MemoryWorkspace()
    await workspace.join(["coder", "reviewer"])
    return workspace


class Retries:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int, float, str]] = []

    async def __call__(self, agent: str, attempt: int, delay: float, error: str) -> None:
        self.asked.append((agent, attempt, delay, error))


async def test_the_prompt_has_the_inbox_line_channel_document_and_steps(ws: MemoryWorkspace) -> None:
    await ws.set_project("Port the parser.")
    await ws.doc_write("coder", "notes.md", "plan: one")
    await ws.send(USER, "@coder @reviewer urgent: the build is red", to=None)
    await ws.send("reviewer", "psst", to="coder")
    wake = await begin_wake(ws, "coder")
    assert wake is not None
    assert "Port the parser." in wake.prompt
    assert "From @user [HIGH]: @coder @reviewer urgent: the build is red" in wake.prompt
    assert "From @reviewer [DM]: psst" in wake.prompt
    assert "plan: one" in wake.prompt
    assert "## Workflow" in wake.prompt and "## Stop rules" in wake.prompt and "## Retry" not in wake.prompt


async def test_a_retry_says_so_in_its_prompt(ws: MemoryWorkspace) -> None:
    await ws.send(USER, "@coder go")
    wake = await begin_wake(ws, "coder", attempt=2, error="model down")
    assert wake is not None and "attempt 2 of 3" in wake.prompt and "model down" in wake.prompt


async def test_one_wake_per_agent_at_a_time(ws: MemoryWorkspace) -> None:
    await ws.send(USER, "@coder go")
    assert await begin_wake(ws, "coder") is not None
    assert await begin_wake(ws, "coder") is None


async def test_an_empty_inbox_begins_no_wake_and_leaves_the_lease_free(ws: MemoryWorkspace) -> None:
    assert await begin_wake(ws, "coder") is None
    assert await ws.acquire_wake("coder", "someone", 5)


async def test_success_posts_the_reply_and_acks_only_up_to_the_mark(ws: MemoryWorkspace) -> None:
    await ws.send(USER, "@coder first")
    wake = await begin_wake(ws, "coder")
    assert wake is not None
    await ws.send(USER, "@coder arrived during the run")
    retries = Retries()
    assert await end_wake(ws, wake, reply="@reviewer done", error=None, retry=retries) == "done"
    assert await ws.cursor("coder") == 1
    assert [e.message.content for e in await ws.inbox("coder")] == ["@coder arrived during the run"]
    assert [e.message.content for e in await ws.inbox("reviewer")] == ["@reviewer done"]
    assert retries.asked == [("coder", 1, 0.0, "")]  # woken again for what arrived meanwhile
    assert await ws.acquire_wake("coder", "next", 5)


async def test_a_failure_acks_nothing_and_asks_for_a_retry_with_backoff(ws: MemoryWorkspace) -> None:
    await ws.send(USER, "@coder go")
    wake = await begin_wake(ws, "coder", settings=FAST)
    assert wake is not None
    retries = Retries()
    assert await end_wake(ws, wake, reply=None, error="boom", retry=retries, settings=FAST) == "retrying"
    assert await ws.cursor("coder") == 0 and await ws.dead_letters() == []
    assert retries.asked == [("coder", 2, 0.5, "boom")]
    assert (await ws.statuses())["coder"].state == "idle"


async def test_the_last_failure_is_a_dead_letter_that_a_replay_clears(ws: MemoryWorkspace) -> None:
    await ws.send(USER, "@coder go")
    wake = await begin_wake(ws, "coder", attempt=3, settings=FAST)
    assert wake is not None
    assert await end_wake(ws, wake, reply=None, error="boom", retry=Retries(), settings=FAST) == "dead"
    [letter] = await ws.dead_letters()
    assert (letter.after, letter.up_to, letter.error) == (0, 1, "boom")
    assert await ws.idle()
    replay = await begin_wake(ws, "coder", replay=letter)
    assert replay is not None and "From @user: @coder go" in replay.prompt
    await end_wake(ws, replay, reply="done now", error=None, retry=Retries())
    assert await ws.dead_letters() == []


async def test_a_redelivered_wake_with_its_token_takes_its_own_lease_again(ws: MemoryWorkspace) -> None:
    await ws.send(USER, "@coder go")
    first = await begin_wake(ws, "coder", token="task-1")
    again = await begin_wake(ws, "coder", token="task-1")
    assert first is not None and again is not None and again.run_id == first.run_id
    assert await begin_wake(ws, "coder", token="task-2") is None


async def test_a_pool_wake_holds_the_short_claim_lease_until_its_run_is_journaled(ws: MemoryWorkspace) -> None:
    """A worker killed before the run is in the journal (where the reapers find it) blocks the
    agent for the claim time only; after, the lease lives as long as a wake may run."""
    from typing import Any

    from shelly_dist.runtime.celery.children.wakes import start_pool_wake

    seen: dict[str, float] = {}

    class Journal:
        async def create_root(self, run_id: str, **_: Any) -> bool:
            seen["journaling"] = await ws.wake_lease_left("coder")
            return True

    async def enqueue(_name: str, _args: list[Any], _kwargs: dict[str, Any]) -> None:
        seen["enqueued"] = await ws.wake_lease_left("coder")

    await ws.send(USER, "@coder fix it")
    settings = WakeSettings(claim=10.0, lease=900.0)
    run_id = await start_pool_wake(ws, Journal(), enqueue, "fp", "s1", "coder", settings=settings)  # type: ignore[arg-type]
    assert run_id.startswith("wake")
    assert 0 < seen["journaling"] <= 10.0 and seen["enqueued"] > 800.0
