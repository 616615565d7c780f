"""A run streams only when a person watches its tree (``streaming.watching``), and its children
inherit the mark through their requests, as a child on a worker does (issue 37)."""

from __future__ import annotations

from shelly_dist import Agent, AgentOptions, FunctionCompleter
from shelly_dist.events import MESSAGE_DELTA, Event
from shelly_dist.models import streaming

from .helpers import Team, delegate


def deltas_seen(seen: list[bool]) -> FunctionCompleter:
    """A model that notes whether its call had somewhere to stream to, and writes two pieces."""

    async def reply(messages: object, tools: object) -> str:
        sink = streaming.deltas()
        seen.append(sink is not None)
        if sink is not None:
            sink.begin()
            sink.text("all ")
            sink.text("done")
        return "all done"

    return FunctionCompleter(reply)


def team_of(seen: list[bool], events: list[Event]) -> Team:
    team = Team()
    team.add("lead", [delegate({"agent": "w", "task": "job"}), "ok"], max_delegation_depth=1, on_event=events.append)
    team.registry.register("w", "worker", lambda: Agent("w", completer=deltas_seen(seen),
                                                          options=AgentOptions()))
    return team


async def test_a_watched_tree_streams_its_childs_reply_as_message_delta_events() -> None:
    seen: list[bool] = []
    events: list[Event] = []
    with streaming.watching():
        await team_of(seen, events).spawn("lead").run("go")
    deltas = [e for e in events if e.kind == MESSAGE_DELTA]
    assert seen == [True]
    assert [(e.agent.split("-")[0], e.data) for e in deltas] == [
        ("w", {"text": "", "begin": True}), ("w", {"text": "all "}), ("w", {"text": "done"})]


async def test_an_unwatched_tree_never_streams() -> None:
    seen: list[bool] = []
    events: list[Event] = []
    await team_of(seen, events).spawn("lead").run("go")
    assert seen == [False] and not [e for e in events if e.kind == MESSAGE_DELTA]
