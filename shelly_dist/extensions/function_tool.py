"""A :class:`~shelly_dist.tools.Tool` from a plain Python function.

The input schema comes from the function's type hints (a pydantic model built from its
parameters, so ``Annotated[int, Field(description=…)]`` and defaults work as in pydantic), the
description from its docstring, the name from the function. An ``async def`` is awaited on the
event loop; a plain ``def`` runs in a thread, never on the loop, so a slow or blocking function
cannot stall the worker's other runs or its lease renewer (DESIGN §3 rule 16).

The result the model sees is the function's return value: a string as it is, anything else as
JSON (pydantic models and dataclasses included).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model
from pydantic_core import to_json

from shelly_dist.errors import UsageError
from shelly_dist.tools import Tool
from shelly_dist.tools.schema import schema_for
from shelly_dist.tools.tool import parse_input

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What every provider accepts as a tool name (Anthropic's and OpenAI's rule)."""


def _input_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters; every parameter must be typed."""
    def parameters() -> None: ...

    # The parameters' hints only: a return type the module cannot resolve (a local class under
    # ``from __future__ import annotations``) does not matter to the schema.
    parameters.__annotations__ = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != "return"}
    try:
        hints = get_type_hints(parameters, globalns=getattr(fn, "__globals__", None), include_extras=True)
    except Exception as exc:
        raise UsageError(f"@tool {name}: cannot read its type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"@tool {name}: *args and **kwargs cannot be described to a model")
        if param.name not in hints:
            raise UsageError(f"@tool {name}: parameter {param.name!r} needs a type hint (its schema comes from it)")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    return create_model(f"{name}_input", __config__=ConfigDict(extra="forbid"), **fields)


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    return to_json(value).decode()


def tool_from_function(
    fn: Callable[..., Any], *, name: str | None = None, group: str = "", retry_on_crash: bool = False,
    approval: bool = False,
) -> Tool:
    """The tool that calls ``fn`` with the model's arguments (see the module docstring)."""
    tool_name = name or fn.__name__
    if not TOOL_NAME.fullmatch(tool_name):
        raise UsageError(f"@tool {tool_name!r}: a tool name is 1-64 letters, digits, '_' or '-' "
                         "(providers refuse others)")
    model = _input_model(fn, tool_name)
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(arguments: str) -> str:
        values = dict(parse_input(tool_name, model, arguments))
        if is_async:
            return _text(await fn(**values))
        return _text(await asyncio.to_thread(fn, **values))

    return Tool(
        name=tool_name,
        description=inspect.getdoc(fn) or "",
        input_schema=schema_for(model),
        handler=handler,
        group=group,
        retry_on_crash=retry_on_crash,
        approval=approval,
    )
