"""A tool: name, description, JSON schema and an async handler.

The handler gets the raw JSON text the model wrote and returns the result text. It raises to
report an error; the agent loop turns the exception's message into an ``is_error`` result, so the
message should name the tool (``delegate: invalid input: …``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shelly_dist.errors import ToolError
from shelly_dist.tools.schema import schema_for

Handler = Callable[[str], Awaitable[str]]
"""``async def handler(arguments_json: str) -> str``."""

M = TypeVar("M", bound=BaseModel)


@dataclass
class Tool:
    """A callable the model can use. ``input_schema`` is a JSON Schema object."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    group: str = field(default="", compare=False)
    """Policy group (``fs``, ``exec``, ``state``…), used by ``group:<name>`` allow/deny rules."""
    retry_on_crash: bool = field(default=False, compare=False)
    """Safe to run again when a worker died while it ran (read-only, or idempotent). Otherwise such
    a call gets the result ``tool outcome unknown: the worker running it stopped``."""
    approval: bool = field(default=False, compare=False)
    """A person approves each call before it runs (``@tool(approval=True)``; an agent's ``approval:``
    gates more): see :mod:`shelly_dist.agent.approval`."""


def parse_input(tool: str, model: type[M], arguments: str) -> M:
    """Validate ``arguments`` against ``model``; a bad input raises ``ToolError`` naming the tool."""
    try:
        return model.model_validate_json(arguments or "{}")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
        )
        raise ToolError(f"{tool}: invalid input: {problems}", tool=tool) from exc


def tool_from_model(
    name: str,
    description: str,
    model: type[M],
    fn: Callable[[M], Awaitable[str]],
    *,
    group: str = "",
    retry_on_crash: bool = False,
    approval: bool = False,
) -> Tool:
    """A tool whose input is validated by ``model`` and whose schema is generated from it."""

    async def handler(arguments: str) -> str:
        return await fn(parse_input(name, model, arguments))

    return Tool(name=name, description=description, input_schema=schema_for(model), handler=handler, group=group,
                retry_on_crash=retry_on_crash, approval=approval)
