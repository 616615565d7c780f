"""``shelly serve --mcp``: the tools of ``shelly mcp serve --agents`` over streamable HTTP under
``/mcp`` on the console's port, behind the console's gate (same token, same ``Host``/``Origin``
checks, same body bound).

The project's toolboxes and one ``agent_<name>`` tool per agent and team, bound to one session
(printed at start), as ``shelly mcp serve`` serves them. The MCP transport is stateless (every
request stands alone, no session kept in this process), so replicas behind one load balancer
serve it alike; an ``agent_<name>`` call runs its agent through the engine's runtime (on the pool:
its top-level run in this process, its children on the workers) and answers when it ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from shelly_dist.console.asgi import mount

if TYPE_CHECKING:
    from shelly_dist.engine.engine import Engine

MCP_PATH = "/mcp"


def mount_mcp(app: web.Application, engine: Engine, session: str) -> int:
    """Serve the MCP tools under :data:`MCP_PATH` of ``app``; returns how many tools."""
    from mcp.server.transport_security import TransportSecuritySettings

    from shelly_dist.cli.mcp import SERVER_NAME, agents_toolbox, served_toolboxes
    from shelly_dist.tools.mcp import build_server

    boxes = [*served_toolboxes(engine, [], session), agents_toolbox(engine, session)]
    server = build_server(boxes, name=SERVER_NAME)
    # The console's gate checks Host and Origin for every path; the SDK's own check would only
    # know loopback names.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mount(app, MCP_PATH, server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True,
                                                    transport_security=security))
    return sum(len(box) for box in boxes)
