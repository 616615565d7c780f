"""MCP on both sides: use MCP servers' tools as toolboxes, and serve our toolboxes over MCP.

The client (:mod:`.client`) keeps each server's SDK session inside one owner task per event loop,
because the SDK requires a session to be opened and closed by the same task. The server
(:mod:`.server`) turns ``Tool`` handlers into MCP tools with Shelly's error split: a failing
handler is an ``isError`` result, an unknown tool a protocol error.
"""

from shelly_dist.tools.mcp.client import MCPClient, MCPServerSpec, close_all, connect_all, result_text
from shelly_dist.tools.mcp.server import build_server, serve_http, serve_stdio

__all__ = [
    "MCPClient",
    "MCPServerSpec",
    "build_server",
    "close_all",
    "connect_all",
    "result_text",
    "serve_http",
    "serve_stdio",
]
