"""An agent's toolboxes (behaviours 8 and 12): de-duplicated by identity; the first tool name wins."""

from __future__ import annotations

from shelly_dist.agent import Agent, Continue, Run
from shelly_dist.chats import Message, Role
from shelly_dist.providers import ScriptedCompleter
from shelly_dist.tools import Tool, ToolBox


def box(label: str, ran: list[str] | None = None, tool_name: str = "dup") -> ToolBox:
    async def handler(arguments: str) -> str:
        if ran is not None:
            ran.append(label)
        return f"from {label}"

    return ToolBox([Tool(tool_name, f"{label} version", {"type": "object"}, handler)], name=label)


def solo(replies: list[object] | None = None) -> Agent:
    return Agent("solo", completer=ScriptedCompleter(replies or ["ok"]))


def test_the_same_toolbox_twice_in_one_call_is_kept_once() -> None:
    a, first = solo(), box("first")
    a.add_toolboxes(first, first)
    assert a.toolboxes == [first]


def test_the_same_toolbox_across_calls_is_kept_once() -> None:
    a, first, second = solo(), box("first"), box("second")
    a.add_toolboxes(first)
    a.add_toolboxes(second, first)
    a.add_toolboxes(first)
    assert a.toolboxes == [first, second]


def test_distinct_toolboxes_with_equal_tools_are_both_kept() -> None:
    a, shared = solo(), box("shared")
    twin = ToolBox(shared.tools(), name="shared")
    a.add_toolboxes(shared, twin)
    assert len(a.toolboxes) == 2


def test_toolboxes_returns_a_copy() -> None:
    a = solo()
    a.toolboxes.append(box("sneaky"))
    assert a.toolboxes == []


async def test_duplicate_tool_names_across_toolboxes_first_handler_wins() -> None:
    ran: list[str] = []
    a = solo([{"tool_calls": [{"name": "dup", "id": "c1"}]}, "done"])
    a.add_toolboxes(box("first", ran), box("second", ran))
    run = Run.start(a, [Message.text("user", Role.USER, "go")])

    assert isinstance(await run.step(), Continue)

    assert ran == ["first"]
    result = a.chat.messages()[-1].tool_results()[0]
    assert (result.tool_call_id, result.content, result.is_error) == ("c1", "from first", False)


async def test_duplicate_tool_names_across_toolboxes_first_definition_is_offered_once() -> None:
    completer = ScriptedCompleter(["done"])
    a = Agent("solo", completer=completer)
    a.add_toolboxes(box("first"), box("second"), box("other", tool_name="extra"))
    run = Run.start(a, [Message.text("user", Role.USER, "go")])
    await run.step()
    assert completer.requests[0].tool_names == ["dup", "extra"]
    assert [t.description for t in run.tools] == ["first version", "other version"]
