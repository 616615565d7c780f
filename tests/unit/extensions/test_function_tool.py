"""``@tool``: a function becomes a tool (schema from hints, description from docstring, sync
functions off the event loop)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError, UsageError
from shelly_dist.extensions import REGISTRY, tool, tool_from_function


def test_the_schema_comes_from_the_type_hints_and_the_description_from_the_docstring() -> None:
    def refund(order_id: str, amount: Annotated[float, Field(description="in euros")], notify: bool = True) -> str:
        """Refund part of an order."""
        return "ok"

    t = tool_from_function(refund)
    assert t.name == "refund" and t.description == "Refund part of an order."
    assert t.input_schema["properties"]["order_id"] == {"type": "string"}
    assert t.input_schema["properties"]["amount"] == {"type": "number", "description": "in euros"}
    assert t.input_schema["required"] == ["order_id", "amount"]


async def test_a_sync_function_runs_in_a_thread_never_on_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    ran_on: list[int] = []

    def where() -> str:
        """Where am I?"""
        ran_on.append(threading.get_ident())
        return "here"

    assert await tool_from_function(where).handler("{}") == "here"
    assert ran_on and ran_on[0] != loop_thread


async def test_an_async_function_is_awaited_and_a_non_string_result_is_json() -> None:
    class Order(BaseModel):
        id: str
        total: float

    async def fetch(order_id: str) -> Order:
        """Fetch an order."""
        await asyncio.sleep(0)
        return Order(id=order_id, total=9.5)

    assert json.loads(await tool_from_function(fetch).handler('{"order_id": "A1"}')) == {"id": "A1", "total": 9.5}


async def test_bad_arguments_are_an_input_error_naming_the_tool() -> None:
    def double(n: int) -> int:
        """Double n."""
        return 2 * n

    with pytest.raises(ToolError, match="double: invalid input: n:"):
        await tool_from_function(double).handler('{"n": "many"}')


def test_an_untyped_parameter_is_refused_at_decoration() -> None:
    def vague(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    with pytest.raises(UsageError, match="parameter 'x' needs a type hint"):
        tool_from_function(vague)


def test_the_decorator_registers_under_the_toolbox_and_keeps_the_function_callable() -> None:
    @tool(toolbox="ft-orders", name="cancel_order", group="orders", retry_on_crash=True)
    def cancel(order_id: str) -> str:
        """Cancel an order."""
        return f"canceled {order_id}"

    assert cancel("A1") == "canceled A1"
    registered = REGISTRY.toolbox("ft-orders").get("cancel_order")
    assert registered is not None and registered.group == "orders" and registered.retry_on_crash


def test_two_functions_claiming_one_tool_name_in_one_toolbox_is_an_error() -> None:
    @tool(toolbox="ft-twice")
    def same(x: int) -> str:
        """First."""
        return ""

    def other(x: int) -> str:
        """Second."""
        return ""

    with pytest.raises(UsageError, match="tool 'same' in toolbox 'ft-twice' is registered twice"):
        tool(toolbox="ft-twice", name="same")(other)


def test_a_name_the_providers_would_refuse_is_an_error_at_decoration() -> None:
    def fine(x: int) -> str:
        """Fine."""
        return ""

    with pytest.raises(UsageError, match="a tool name is 1-64 letters"):
        tool_from_function(fine, name="orders.lookup")


def test_a_name_with_a_trailing_newline_is_refused_at_decoration() -> None:
    # ``$`` in re.match accepts a newline before the end: the name must match whole
    def fine(x: int) -> str:
        """Fine."""
        return ""

    with pytest.raises(UsageError, match="a tool name is 1-64 letters"):
        tool_from_function(fine, name="lookup\n")
