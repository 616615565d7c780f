"""The wake budget, identical in memory and in Redis: counted atomically, paused over a bound,
resumed by the user."""

from __future__ import annotations

import asyncio

from shelly_dist.workspace import Workspace
from shelly_dist.workspace.models import WakeBudget


async def test_more_wakes_in_one_minute_than_the_budget_pauses_the_session(ws: Workspace) -> None:
    await ws.set_wake_budget(WakeBudget(per_minute=3, loop_rounds=0))
    verdicts = [await ws.charge_wake("coder", now=1000.0 + i, user_said=0) for i in range(4)]
    assert verdicts[:3] == ["", "", ""]
    assert verdicts[3] == "over 3 wakes in one minute"
    assert await ws.wakes_paused() == "over 3 wakes in one minute"
    assert await ws.charge_wake("coder", now=5000.0, user_said=0) == "over 3 wakes in one minute", \
        "paused stays paused, even a minute later"


async def test_a_user_message_after_the_pause_resumes_with_fresh_counts(ws: Workspace) -> None:
    await ws.set_wake_budget(WakeBudget(total=1))
    assert await ws.charge_wake("coder", now=1.0, user_said=0) == ""
    assert (await ws.charge_wake("coder", now=2.0, user_said=0)).startswith("the session's wake budget is spent")
    said = await ws.send("user", "@coder carry on")
    assert await ws.charge_wake("coder", now=3.0, user_said=said.id) == ""
    assert await ws.wakes_paused() == ""


async def test_concurrent_wakes_never_overspend_the_budget(ws: Workspace) -> None:
    await ws.set_wake_budget(WakeBudget(total=5, loop_rounds=0))
    verdicts = await asyncio.gather(*(ws.charge_wake(f"a{i}", now=1.0, user_said=0) for i in range(20)))
    assert verdicts.count("") == 5
    assert (await ws.wake_ledger()).total == 5
