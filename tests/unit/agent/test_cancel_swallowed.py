"""A run whose cancellation something under it swallowed (redis-py's ``asyncio.wait_for`` on
Python 3.11 returns instead of raising when the cancel lands as a command ends: a journal write, a
hook's Redis call) asks no model and starts no tool after it: the run ends as cancelled there."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shelly_dist import Message, Role, Tool, ToolBox
from shelly_dist.agent import Run

from .helpers import Team, call, complete


async def swallow_own_cancel() -> None:
    """Cancel the current task and catch it, as a library that swallowed the cancel would."""
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.get_running_loop().create_future()  # the cancel lands here, and is caught


def solo(ran: list[str]) -> Team:
    async def write(arguments: str) -> str:
        ran.append("write")
        return "written"

    tools = ToolBox([Tool("write", "writes", {"type": "object"}, write, retry_on_crash=False)], name="t")
    team = Team()
    team.add("solo", [call("write"), complete("done")], toolboxes=(tools,))
    return team


async def test_a_cancel_swallowed_before_the_model_call_asks_no_model() -> None:
    team = solo([])

    async def before_model(run: Run) -> None:
        await swallow_own_cancel()  # e.g. a Redis read of the spawner, cancelled as it returned

    run = Run.start(team.spawn("solo"), [Message.text("user", Role.USER, "go")], before_model=before_model)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(run.until_done())
    assert team.requests("solo") == []


async def test_a_cancel_swallowed_by_the_started_checkpoint_starts_no_tool() -> None:
    ran: list[str] = []
    team = solo(ran)

    async def checkpoint(run: Run, reason: str) -> None:
        if reason == "started":  # the journal write before a tool that is not safe to retry
            await swallow_own_cancel()

    run = Run.start(team.spawn("solo"), [Message.text("user", Role.USER, "go")], checkpoint=checkpoint)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(run.until_done())
    assert ran == [] and len(team.requests("solo")) == 1
