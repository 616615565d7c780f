"""A tiny MCP server over a fixed test toolbox, run as a real subprocess by the MCP tests.

``python toolbox_server.py`` serves stdio (what ``shelly mcp serve`` will do); the tools are
``echo`` (returns its arguments), ``add`` (pydantic-validated), ``fail`` (raises "tool failed")
and ``pid`` (the server's process id, so a test can kill it).
"""

from __future__ import annotations

import asyncio
import os

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools import Tool, ToolBox, tool_from_model
from shelly_dist.tools.mcp import build_server, serve_stdio


class AddInput(BaseModel):
    a: int = Field(description="first addend")
    b: int = Field(description="second addend")


async def _echo(arguments: str) -> str:
    return arguments


async def _fail(arguments: str) -> str:
    raise ToolError("tool failed", tool="fail")


async def _pid(arguments: str) -> str:
    return str(os.getpid())


async def _add(data: AddInput) -> str:
    return str(data.a + data.b)


def test_toolbox() -> ToolBox:
    """The toolbox every MCP test serves."""
    empty = {"type": "object", "properties": {}}
    return ToolBox(
        [
            Tool("echo", "Return the arguments as JSON.", {"type": "object"}, _echo),
            tool_from_model("add", "Add two integers.", AddInput, _add),
            Tool("fail", "Always fails.", empty, _fail),
            Tool("pid", "The server's process id.", empty, _pid),
        ],
        name="testbox",
    )


test_toolbox.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


if __name__ == "__main__":
    if os.environ.get("TOOLBOX_STARTED_BY"):  # which process started this server (tests of who starts what)
        with open(os.environ["TOOLBOX_STARTED_BY"], "a") as started:
            started.write(f"{os.getppid()}\n")
    asyncio.run(serve_stdio(build_server([test_toolbox()], name="shelly-test")))
