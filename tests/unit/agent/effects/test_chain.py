"""The effect chain in the loop: phases, order, the first error, tool filters, and state that is
journaled with the run."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from shelly_dist import Agent, AgentOptions, Run, ScriptedCompleter
from shelly_dist.agent.effects import EffectPhase, IterationContext
from shelly_dist.agent.effects.base import ordered
from shelly_dist.agent.effects.compact import Compact
from shelly_dist.agent.effects.nudges import LoopDetect
from shelly_dist.agent.effects.scope import ToolScope
from shelly_dist.errors import AgentError

from ..helpers import call, echo_toolbox


@dataclass
class Recorder:
    name: str
    log: list[str]
    fail_in: EffectPhase | None = None
    kind: str = "recorder"
    seen: list[int] = field(default_factory=list)

    async def evaluate(self, ic: IterationContext) -> None:
        self.log.append(f"{self.name}:{ic.phase.value}:{ic.iteration}")
        ic.state["calls"] = ic.state.get("calls", 0) + 1
        self.seen.append(ic.state["calls"])
        if ic.phase == self.fail_in:
            raise AgentError(f"{self.name} stops the run", agent=ic.agent_name)


def scripted_agent(effects: list, replies: list) -> Agent:
    agent = Agent("tester", "", completer=ScriptedCompleter(replies), options=AgentOptions(effects=effects))
    agent.add_toolboxes(echo_toolbox())
    return agent


async def test_effects_run_in_registration_order_before_and_after_each_model_call():
    log: list[str] = []
    agent = scripted_agent([Recorder("a", log), Recorder("b", log)], [call("echo", {"text": "x"}), "done"])
    await agent.run("go")
    assert log == [
        "a:before_complete:0", "b:before_complete:0", "a:after_complete:1", "b:after_complete:1",
        "a:before_complete:1", "b:before_complete:1", "a:after_complete:2", "b:after_complete:2",
    ]


@pytest.mark.parametrize("phase", list(EffectPhase))
async def test_the_first_effect_error_stops_the_rest_and_ends_the_run(phase: EffectPhase):
    log: list[str] = []
    agent = scripted_agent([Recorder("a", log, fail_in=phase), Recorder("b", log)], ["done"])
    with pytest.raises(AgentError, match="a stops the run"):
        await agent.run("go")
    assert not any(entry.startswith(f"b:{phase.value}") for entry in log)


def test_compaction_class_effects_are_ordered_first():
    loop, scope, compact = LoopDetect(), ToolScope(["echo"]), Compact(1000)
    assert ordered([loop, scope, compact]) == [compact, loop, scope]


async def test_tool_scope_hides_tools_from_the_model_call():
    completer = ScriptedCompleter(["done"])
    agent = Agent("tester", "", completer=completer, options=AgentOptions(effects=[ToolScope(["boom"])]))
    agent.add_toolboxes(echo_toolbox())
    await agent.run("go")
    assert completer.requests[0].tool_names == ["echo"]


async def test_effect_state_lives_in_the_run_state_and_survives_a_snapshot():
    log: list[str] = []
    recorder = Recorder("a", log)
    agent = scripted_agent([recorder], [call("echo", {"text": "x"}), "done"])
    run = Run.start(agent, [])
    await run.step()  # one model call and its tools: before + after
    snapshot = run.snapshot()
    assert snapshot.effects == {"0:recorder": {"calls": 2}}

    restored = scripted_agent([recorder], [call("echo", {"text": "x"}), "done"])
    again = Run.restore(restored, type(snapshot).model_validate_json(snapshot.model_dump_json()))
    await again.until_done()
    assert recorder.seen == [1, 2, 3, 4], "the restored run went on counting from the journaled state"
