"""Expose shelly toolboxes as an MCP server (Shelly's ``mcpserver``), over stdio or streamable HTTP.

Built on the SDK's low-level ``Server`` rather than ``MCPServer``: our tools already carry a JSON
schema and a raw-JSON handler, so there is no Python signature to introspect. The split of errors
is the contract Shelly's tests pin (behaviour 82): a handler that raises gives an ``isError``
*result* carrying the error text, so the calling model can read it and recover; an unknown tool is
a JSON-RPC *protocol* error naming the tool, because the caller asked for something that was never
listed. Missing arguments are sent to the handler as ``{}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError as SDKMCPError

from shelly_dist.tools.mcp.bearer import BearerTokenAuth
from shelly_dist.tools.tool import Tool
from shelly_dist.tools.toolbox import ToolBox

logger = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_SECONDS = 3
"""How long an HTTP server waits for open streams (a client's SSE GET) before closing them."""


def _tools_by_name(toolboxes: Sequence[ToolBox]) -> dict[str, Tool]:
    """All tools in order; a later toolbox's tool replaces an earlier one of the same name."""
    tools: dict[str, Tool] = {}
    for box in toolboxes:
        for tool in box:
            tools[tool.name] = tool
    return tools


def _text_result(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


def build_server(toolboxes: Sequence[ToolBox], name: str = "shelly", *, version: str = "") -> Server[Any]:
    """An MCP server listing every tool of ``toolboxes`` and calling their handlers.

    The tool set is fixed when the server is built. Calls run concurrently; each handler gets the
    arguments as JSON text (``{}`` when the client sent none).
    """
    tools = _tools_by_name(toolboxes)

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
                for t in tools.values()
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = tools.get(params.name)
        if tool is None:
            raise SDKMCPError(code=types.INVALID_PARAMS, message=f"tool not found: {params.name}")
        try:
            text = await tool.handler(json.dumps(params.arguments or {}))
        except Exception as exc:
            logger.debug("mcp server %r: tool %s failed: %s", name, tool.name, exc)
            return _text_result(str(exc) or type(exc).__name__, is_error=True)
        return _text_result(text)

    def input_schema(tool_name: str) -> Mapping[str, Any] | None:
        tool = tools.get(tool_name)
        return tool.input_schema if tool else None

    return Server(
        name,
        version=version,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=input_schema,
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin/stdout until stdin closes."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def listen(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket bound to ``host:port`` and listening (``port=0`` picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


async def serve_http(
    server: Server[Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    on_listening: Callable[[int], None] | None = None,
    token: str | None = None,
) -> None:
    """Serve streamable HTTP at ``http://host:port/path`` until cancelled (or SIGINT/SIGTERM).

    With ``token``, every request must carry ``Authorization: Bearer <token>`` (401 otherwise;
    :class:`~shelly_dist.tools.mcp.bearer.BearerTokenAuth`).

    The socket is bound and listening before ``on_listening(port)`` is called (``port=0`` picks a
    free one), so a client may connect from then on: connections wait in the backlog until the
    server is up. Cancelling this coroutine shuts the server down gracefully, then re-raises.
    """
    sock = listen(host, port)
    bound_port = int(sock.getsockname()[1])
    app: Any = server.streamable_http_app(streamable_http_path=path, host=host)
    if token:
        app = BearerTokenAuth(app, token)
    if on_listening is not None:
        on_listening(bound_port)
    await serve_asgi(app, sock)


async def serve_asgi(app: Any, sock: socket.socket) -> None:
    """Serve the ASGI ``app`` with uvicorn on the listening ``sock`` until cancelled; cancelling
    shuts it down gracefully, then re-raises. The socket is closed on the way out."""
    import uvicorn  # only the HTTP servers need it

    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    http = uvicorn.Server(config)
    task = asyncio.ensure_future(http.serve(sockets=[sock]))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        http.should_exit = True
        await task
        raise
    finally:
        sock.close()
