"""``shelly mcp serve``: the project's toolboxes (and optionally its agents) as an MCP server.

Why a server at all: an MCP client (an IDE, another agent framework, Claude Desktop) can then use
exactly the tools a shelly team uses — the built-ins with their permission guards, the configured
MCP servers, and the session's blackboard and task board on the configured backend — and, with
``--agents``, hand a whole task to a shelly agent (``agent_<name>``), which runs through the
engine's runtime (embedded, or on the Celery workers when a broker is configured).

With ``--decisions`` it also serves ``pending_decisions`` and ``decide``: the questions and tool
approvals the served session's agents wait for (on a pool, every session's with ``all_sessions``)
are listed and answered by the MCP client — another way in to the same ``Engine.decisions`` the
CLI, the console and ``Session`` use. The engine then lets its agents' decisions wait for them (an
agent call stays open meanwhile; the client answers from another call), where without it a
question or approval embedded is answered "nobody can answer".

Everything served is bound to one session (``--session``, default a new id printed on stderr), so
a client and the agents it starts share one blackboard, and ``shelly state --session`` sees it.
Agent calls are not saved as resumable sessions: several may run at once under the same id.

stdout belongs to the protocol on stdio (the SDK diverts stray writes to stderr while serving);
every message of ours goes to stderr. SIGTERM stops the server cleanly with exit 0, SIGINT with
130, never with a traceback.

Over HTTP on an address other clients can reach (anything but loopback), the server serves the
project's tools to the network, so it requires a bearer token (``SHELLY_MCP_TOKEN``, or
``--token``, which ``ps`` shows to every user of the machine) and checks it on every request; it
refuses to start without one. On loopback a token is optional and checked when given.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Coroutine
from typing import Any

import click
from pydantic import BaseModel, Field

from shelly_dist.cli.errors import EXIT_INTERRUPTED, EXIT_OK, fail, run_async
from shelly_dist.cli.options import config_options
from shelly_dist.engine import Engine, new_session_id
from shelly_dist.engine.toolboxes import HEADLESS_SKIPPED
from shelly_dist.errors import UsageError
from shelly_dist.tools import Tool, ToolBox, tool_from_model
from shelly_dist.tools.builtin.ask import NoAnswerer

SERVER_NAME = "shelly"
MCP_PATH = "/mcp"
TOKEN_ENV = "SHELLY_MCP_TOKEN"


class AgentTaskInput(BaseModel):
    """The input of an ``agent_<name>`` tool."""

    task: str = Field(min_length=1, description="What the agent should do.")
    context: str = Field("", description="Background the agent needs (files, decisions, constraints).")


def agent_message(data: AgentTaskInput) -> str:
    """The user message an agent tool sends: the task, after a ``<context>`` block when given."""
    if not data.context.strip():
        return data.task
    return f"<context>\n{data.context.strip()}\n</context>\n\n{data.task}"


def default_toolbox_names(engine: Engine) -> list[str]:
    """Every toolbox some agent uses, in config order, without duplicates or headless-skipped ones."""
    names: list[str] = []
    for spec in engine.config.agents:
        for name in spec.toolbox_names():
            if name not in names and name not in HEADLESS_SKIPPED:
                names.append(name)
    return names


def served_toolboxes(engine: Engine, names: list[str], session: str) -> list[ToolBox]:
    """The toolboxes ``names`` (default: :func:`default_toolbox_names`) bound to ``session``.

    An unknown name is a ``ConfigError`` (exit 2) naming it.
    """
    boxes: list[ToolBox] = []
    for name in names or default_toolbox_names(engine):
        box = engine.toolboxes.named(name, session)
        if box is not None:
            boxes.append(box)
    return boxes


def agents_toolbox(engine: Engine, session: str) -> ToolBox:
    """One ``agent_<name>`` tool per configured agent and team; each call runs a fresh top-level session."""

    def tool_for(name: str, description: str) -> Tool:
        async def run(data: AgentTaskInput) -> str:
            outcome = await engine.session(session, agent=name, persist=False).send(agent_message(data))
            return outcome.reply.text_content()

        text = f"Run the shelly agent {name!r} on a task and return its final answer."
        if description:
            text += f" The agent: {description}"
        return tool_from_model(f"agent_{name}", text, AgentTaskInput, run)

    named = [*engine.config.agents, *engine.config.teams]
    return ToolBox([tool_for(a.name, a.description) for a in named], name="agents")


class DecisionsInput(BaseModel):
    """The input of ``pending_decisions``."""

    all_sessions: bool = Field(False, description="Every session's decisions (on a worker pool), not only this one's.")


class DecideInput(BaseModel):
    """The input of ``decide``."""

    id: str = Field(min_length=1, description="The decision's id (q-N, a-N) from pending_decisions.")
    answer: str = Field(min_length=1, description="A question's answer; for an approval: yes, always, or no <reason>.")
    session: str = Field("", description="The decision's session (default: the one this server is bound to).")


def decisions_toolbox(engine: Engine, session: str) -> ToolBox:
    """``pending_decisions`` and ``decide``: the people-in-the-loop tools of ``--decisions``."""
    from shelly_dist.engine.decisions import who

    async def pending(data: DecisionsInput) -> str:
        return json.dumps(await engine.decisions.list(session=None if data.all_sessions else session),
                          ensure_ascii=False)

    async def decide(data: DecideInput) -> str:
        await engine.decisions.answer(data.session or session, data.id, data.answer, by=who("mcp"))
        return f"decided {data.id}"

    return ToolBox([
        tool_from_model("pending_decisions", "List the questions and tool approvals shelly agents wait for "
                        "(id, kind, path, tool and arguments or question text).", DecisionsInput, pending),
        tool_from_model("decide", "Answer a pending decision: a question with text, an approval with yes, always "
                        "or no <reason>.", DecideInput, decide),
    ], name="decisions")


async def until_signal(main: Coroutine[Any, Any, None]) -> int:
    """Run ``main`` until it ends (exit 0) or a signal stops it: SIGTERM exit 0, SIGINT 130.

    The handlers are in place before ``main`` first runs, so a signal during start-up (the engine
    opening MCP servers) also cancels cleanly: whatever ``main`` opened closes on the way out.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    codes: list[int] = []

    def stop(code: int) -> None:
        codes.append(code)
        task.cancel()

    handled = ((signal.SIGTERM, EXIT_OK), (signal.SIGINT, EXIT_INTERRUPTED))
    for sig, code in handled:
        loop.add_signal_handler(sig, stop, code)
    try:
        await task
    except asyncio.CancelledError:
        if not codes:
            raise
    finally:
        for sig, _ in handled:
            loop.remove_signal_handler(sig)
    return codes[0] if codes else EXIT_OK


def _say(text: str) -> None:
    click.echo(text, err=True)


async def serve(
    *,
    toolbox_names: list[str],
    with_agents: bool,
    transport: str,
    with_decisions: bool = False,
    host: str,
    port: int,
    config_path: str | None,
    shelly_dir: str,
    session_id: str | None,
    token: str | None = None,
) -> None:
    """Open the engine, build the server, serve until the client leaves (stdio) or forever (http)."""
    from shelly_dist.tools.mcp import build_server, serve_http, serve_stdio

    answerer = None if with_decisions else NoAnswerer()  # decisions wait for `decide`, or nobody answers
    async with await Engine.open(config_path, shelly_dir=shelly_dir, answerer=answerer) as engine:
        session = session_id or new_session_id()
        boxes = served_toolboxes(engine, toolbox_names, session)
        if with_agents:
            boxes.append(agents_toolbox(engine, session))
        if with_decisions:
            boxes.append(decisions_toolbox(engine, session))
        server = build_server(boxes, name=SERVER_NAME)
        tools = sum(len(box) for box in boxes)
        _say(f"session {session} ({tools} tools, runtime {engine.runtime.name})")
        if transport == "stdio":
            await serve_stdio(server)
            return

        def listening(bound: int) -> None:
            auth = " (bearer token required)" if token else ""
            _say(f"serving MCP on http://{host}:{bound}{MCP_PATH}{auth}")

        await serve_http(server, host=host, port=port, path=MCP_PATH, on_listening=listening, token=token)


@click.group("mcp")
def mcp_group() -> None:
    """Model Context Protocol: serve shelly's toolboxes and agents to MCP clients."""


@mcp_group.command("serve")
@click.option("--toolbox", "toolbox_names", multiple=True, metavar="NAME",
              help="A toolbox to serve (repeatable; default: every toolbox an agent uses).")
@click.option("--agents", "with_agents", is_flag=True, help="Also serve each agent as a tool agent_<name>.")
@click.option("--decisions", "with_decisions", is_flag=True,
              help="Also serve pending_decisions and decide: the client answers the agents' questions and approvals.")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: the address to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="HTTP: the port (0 picks a free one).")
@click.option("--token", envvar=TOKEN_ENV, default=None, show_envvar=True,
              help="HTTP: bearer token every request must carry (required off loopback; prefer the "
                   "environment variable, which ps does not show).")
@config_options
@click.option("--session", "session_id", default=None, help="Session the tools are bound to (default: new).")
def serve_command(
    toolbox_names: tuple[str, ...],
    with_agents: bool,
    with_decisions: bool,
    transport: str,
    host: str,
    port: int,
    config_path: str | None,
    shelly_dir: str,
    session_id: str | None,
    token: str | None,
) -> None:
    """Serve toolboxes (and with --agents, agents) over MCP, on stdio or streamable HTTP."""
    from shelly_dist.tools.mcp.bearer import is_loopback

    if transport == "http" and not token and not is_loopback(host):
        fail(UsageError(f"mcp serve: --host {host} is reachable from other machines: set {TOKEN_ENV} "
                        "(or --token) so every request must carry Authorization: Bearer <token>"))
    code = run_async(
        until_signal(
            serve(
                toolbox_names=list(toolbox_names),
                with_agents=with_agents,
                with_decisions=with_decisions,
                transport=transport,
                host=host,
                port=port,
                config_path=config_path,
                shelly_dir=shelly_dir,
                session_id=session_id,
                token=token if transport == "http" else None,
            )
        )
    )
    sys.exit(code)

