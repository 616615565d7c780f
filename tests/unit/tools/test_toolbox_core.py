"""ToolBox: insertion order, replace in place, Shelly's filter, merge; tools from pydantic models."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools import Tool, ToolBox, tool_from_model


def tool(name: str, reply: str = "") -> Tool:
    async def handler(arguments: str) -> str:
        return reply or name

    return Tool(name, f"the {name} tool", {"type": "object", "properties": {}}, handler)


def test_tools_keep_insertion_order() -> None:
    box = ToolBox([tool("c"), tool("a"), tool("b")])
    assert box.names() == ["c", "a", "b"]
    assert [t.name for t in box] == ["c", "a", "b"]


async def test_registering_an_existing_name_replaces_the_tool_in_place() -> None:
    box = ToolBox([tool("a"), tool("b"), tool("c")])
    box.register(tool("b", reply="new b"))
    assert box.names() == ["a", "b", "c"]
    got = box.get("b")
    assert got is not None and await got.handler("{}") == "new b"


def test_get_of_an_unknown_name_is_none() -> None:
    assert ToolBox([tool("a")]).get("zzz") is None


def test_len_and_contains() -> None:
    box = ToolBox([tool("a"), tool("b")])
    assert len(box) == 2
    assert "a" in box and "zzz" not in box


def test_filter_none_returns_the_same_toolbox() -> None:
    box = ToolBox([tool("a")])
    assert box.filter(None) is box


def test_filter_empty_list_returns_an_empty_toolbox() -> None:
    box = ToolBox([tool("a"), tool("b")])
    filtered = box.filter([])
    assert filtered is not box
    assert filtered.names() == []


def test_filter_returns_named_tools_in_requested_order_skipping_unknown() -> None:
    box = ToolBox([tool("a"), tool("b"), tool("c")])
    assert box.filter(["c", "ghost", "a"]).names() == ["c", "a"]


def test_filter_does_not_change_the_original() -> None:
    box = ToolBox([tool("a"), tool("b")])
    box.filter(["a"]).register(tool("x"))
    assert box.names() == ["a", "b"]


async def test_merge_appends_the_others_and_later_names_replace_earlier_in_place() -> None:
    first = ToolBox([tool("a"), tool("b")])
    second = ToolBox([tool("c"), tool("b", reply="second b")])
    merged = first.merge(second)
    assert merged.names() == ["a", "b", "c"]
    got = merged.get("b")
    assert got is not None and await got.handler("{}") == "second b"


def test_merge_leaves_the_inputs_unchanged() -> None:
    first, second = ToolBox([tool("a")]), ToolBox([tool("b")])
    first.merge(second)
    assert (first.names(), second.names()) == (["a"], ["b"])


class Greet(BaseModel):
    name: str = Field(description="who to greet")
    times: int = 1


async def _greet(inp: Greet) -> str:
    return " ".join([f"hi {inp.name}"] * inp.times)


async def test_tool_from_model_passes_validated_input_to_the_function() -> None:
    t = tool_from_model("greet", "greets", Greet, _greet)
    assert await t.handler(json.dumps({"name": "bo", "times": 2})) == "hi bo hi bo"


def test_tool_from_model_takes_its_schema_from_the_model() -> None:
    t = tool_from_model("greet", "greets", Greet, _greet, group="demo")
    assert t.input_schema["required"] == ["name"]
    assert t.input_schema["properties"]["name"]["description"] == "who to greet"
    assert (t.name, t.description, t.group) == ("greet", "greets", "demo")


async def test_tool_from_model_rejects_invalid_input_with_a_tool_error_naming_the_tool() -> None:
    t = tool_from_model("greet", "greets", Greet, _greet)
    with pytest.raises(ToolError, match=r"^greet: invalid input: name") as info:
        await t.handler(json.dumps({"times": 2}))
    assert info.value.tool == "greet"


async def test_tool_from_model_rejects_malformed_json_with_a_tool_error() -> None:
    t = tool_from_model("greet", "greets", Greet, _greet)
    with pytest.raises(ToolError, match=r"^greet: invalid input"):
        await t.handler("{not json")


async def test_tool_from_model_treats_empty_arguments_as_an_empty_object() -> None:
    class NoArgs(BaseModel):
        flag: bool = False

    async def fn(inp: NoArgs) -> str:
        return str(inp.flag)

    assert await tool_from_model("t", "d", NoArgs, fn).handler("") == "False"
