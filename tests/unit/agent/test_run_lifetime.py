"""A finished run is freed by reference counting: nothing it builds points back at it."""

from __future__ import annotations

import gc
import weakref

from shelly_dist import Message, Role
from shelly_dist.agent import Run
from shelly_dist.agent.interaction import auto_answer

from .helpers import Team, complete


async def test_a_finished_child_run_with_every_ending_tool_is_freed_without_the_cycle_collector():
    team = Team()
    team.add("helper", [])
    team.add("child", [complete("done")], max_handoffs=2, request_input=auto_answer("ctx"))
    run = Run.start(team.spawn("child", depth=1), [Message.text("user", Role.USER, "go")])
    await run.until_done()
    assert {"task_complete", "handoff", "request_input"} <= {t.name for t in run.tools}
    dead = weakref.ref(run)
    gc.disable()
    try:
        del run
        assert dead() is None, "the run is still referenced: it sits in a reference cycle"
    finally:
        gc.enable()
