"""Connect to an MCP server (stdio or streamable HTTP) and offer its tools as a ``ToolBox``.

The invariant that shapes this module: the SDK's session and transport are anyio context managers
that must be entered and exited by the *same* task, while our callers are many tasks (the agent
loop runs tool calls concurrently). So each :class:`MCPClient` owns its session inside one
long-lived *owner task*; callers hand requests to it through a queue and await a future. The owner
runs each request in its own child task, so calls stay concurrent (no hidden lock).
A stdio server's stderr goes to the process's real stderr (:func:`server_errlog`), which a Celery
worker's logging proxy is not.

A client belongs to the event loop it was started on (a Celery worker keeps one loop for its
whole life, DESIGN.md §3.11). When a stdio server dies, the next call sees the connection closed;
the owner then reopens the session once and retries that call. Results follow Shelly's
``mcpclient``: text contents joined with ``"\\n"``; an ``isError`` result raises
``mcpclient: tool error: <text>``, which the agent loop turns into an error result.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError as SDKMCPError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shelly_dist.errors import MCPError, ToolError, UsageError
from shelly_dist.tools.tool import Tool
from shelly_dist.tools.toolbox import ToolBox

logger = logging.getLogger(__name__)

_LIST_PAGE_CAP = 100
"""A server whose tools/list cursor never ends cannot hang start-up."""

_CONNECTION_LOST = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    OSError,
    httpx2.TransportError,
)


class MCPServerSpec(BaseModel):
    """One entry of the config's ``mcp_servers``: a command to run, or a URL to reach."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Server name; also the toolbox name agents refer to.")
    command: str | None = Field(default=None, description="Executable of a stdio server.")
    args: list[str] = Field(default_factory=list, description="Arguments of the stdio command.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for the stdio command (over a safe default)."
    )
    url: str | None = Field(default=None, description="Endpoint of a streamable HTTP server.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent to a URL server.")
    retry_on_crash: bool = Field(
        default=False, description="Its tools are safe to run again after a worker died while one ran."
    )

    @model_validator(mode="after")
    def _exactly_one_transport(self) -> MCPServerSpec:
        if bool(self.command) == bool(self.url):
            raise ValueError(f'mcp server "{self.name}": exactly one of command or url is required')
        return self


@dataclass(eq=False)
class _Request:
    op: Literal["list", "call"]
    future: asyncio.Future[Any]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    retried: bool = False


@dataclass(frozen=True)
class _Restart:
    generation: int


class _Close:
    pass


_CLOSE = _Close()
_Item = _Request | _Restart | _Close


def _settle(future: asyncio.Future[Any], *, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _describe(exc: BaseException) -> str:
    """A one-line reason, unwrapping the single-exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, SDKMCPError):
        return exc.code == types.CONNECTION_CLOSED
    return isinstance(exc, _CONNECTION_LOST)


def server_errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours, when it is a real file.

    A Celery worker replaces ``sys.stderr`` with a logging proxy that has no file descriptor, and
    the SDK's default (``sys.stderr``, bound at import) would then fail every server's start with
    ``'LoggingProxy' object has no attribute 'fileno'``; the process's original stderr is used then.
    """
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and stream.fileno() >= 0:
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return _devnull()


@functools.cache
def _devnull() -> TextIO:
    """One null sink for the process's life, for a process with no stderr at all."""
    return open(os.devnull, "w")  # deliberately never closed


def result_text(result: types.CallToolResult) -> str:
    """Shelly's reading of a tool result: the text contents joined with ``"\\n"``.

    A result with no text but structured content gives that content as JSON.
    """
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content)
    return text


class MCPClient:
    """One MCP server's session, owned by one task of one event loop.

    ``start`` opens the session; after that, :meth:`call_tool`, :meth:`list_tools` and the handlers
    of :meth:`toolbox` may be called concurrently from any task of that loop. ``aclose`` is
    idempotent. Use ``async with MCPClient(spec) as client`` to pair the two.
    """

    def __init__(
        self,
        spec: MCPServerSpec,
        *,
        startup_timeout: float = 30.0,
        call_timeout: float | None = None,
    ) -> None:
        self.spec = spec
        self._startup_timeout = startup_timeout
        self._call_timeout = call_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._owner: asyncio.Task[None] | None = None
        self._closed = False
        self.restarts = 0
        """How many times the session was reopened after the connection was lost."""

    @property
    def name(self) -> str:
        return self.spec.name

    def _error(self, reason: str, *, tool: str = "") -> MCPError:
        return MCPError(f'mcp server "{self.name}": {reason}', server=self.name, tool=tool)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the session; raises ``MCPError`` naming the server when it cannot start.

        Calling it again on a started client does nothing.
        """
        if self._closed:
            raise UsageError(f'mcp server "{self.name}": client is closed')
        if self._owner is not None:
            self._check_loop()
            return
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp-server:{self.name}")
        try:
            await ready
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the session and stop the server process. Idempotent; safe if never started."""
        self._closed = True
        owner = self._owner
        if owner is None:
            return
        if not owner.done():
            self._queue.put_nowait(_CLOSE)
        # wait() neither raises the owner's outcome nor swallows our own cancellation.
        await asyncio.wait([owner])
        if not owner.cancelled() and (crash := owner.exception()) is not None:
            logger.error('mcp server "%s": session task failed: %s', self.name, _describe(crash))
        self._fail_queued(self._error("client is closed"))

    async def __aenter__(self) -> MCPClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- requests ------------------------------------------------------------------------------

    def _check_loop(self) -> None:
        if self._owner is None:
            raise UsageError(f'mcp server "{self.name}": client is not started')
        if asyncio.get_running_loop() is not self._loop:
            raise UsageError(
                f'mcp server "{self.name}": client used from another event loop; open one per loop'
            )

    async def _submit(self, request: _Request) -> Any:
        self._check_loop()
        if self._closed or (self._owner is not None and self._owner.done()):
            raise self._error("client is closed", tool=request.tool)
        self._queue.put_nowait(request)
        return await request.future

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists (all pages)."""
        fut: asyncio.Future[list[types.Tool]] = asyncio.get_running_loop().create_future()
        return await self._submit(_Request("list", fut))  # type: ignore[no-any-return]

    async def call_tool(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        """Call ``tool`` and return its text; an ``isError`` result raises ``MCPError``.

        The error text is Shelly's: ``mcpclient: tool error: <text>``. A protocol error (such as
        an unknown tool) raises ``MCPError`` naming the server and the tool.
        """
        fut: asyncio.Future[types.CallToolResult] = asyncio.get_running_loop().create_future()
        result: types.CallToolResult = await self._submit(
            _Request("call", fut, tool=tool, arguments=dict(arguments or {}))
        )
        text = result_text(result)
        if result.is_error:
            raise MCPError(f"mcpclient: tool error: {text}", server=self.name, tool=tool)
        return text

    async def toolbox(self) -> ToolBox:
        """The server's tools as ``ToolBox(name=<server>)``, group ``mcp:<server>``."""
        return ToolBox((self._as_tool(t) for t in await self.list_tools()), name=self.name)

    def _as_tool(self, listed: types.Tool) -> Tool:
        name = listed.name

        async def handler(arguments: str) -> str:
            try:
                parsed = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                raise ToolError(f"{name}: invalid input: {exc}", tool=name) from exc
            if not isinstance(parsed, dict):
                raise ToolError(f"{name}: invalid input: arguments must be a JSON object", tool=name)
            return await self.call_tool(name, parsed)

        return Tool(
            name=name,
            description=listed.description or "",
            input_schema=dict(listed.input_schema),
            handler=handler,
            group=f"mcp:{self.name}",
            retry_on_crash=self.spec.retry_on_crash,
        )

    # -- the owner task ------------------------------------------------------------------------

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[Client]:
        """Open the transport and the SDK client; the handshake must finish within the startup timeout.

        The deadline sits on a scope around the whole session and is lifted once it is open:
        ``anyio.fail_after`` around the entry alone would exit before the transport's own task
        group, which anyio forbids.
        """
        with anyio.CancelScope(deadline=anyio.current_time() + self._startup_timeout) as startup:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client(stack))
                startup.deadline = math.inf
                yield client
        if startup.cancelled_caught:
            raise TimeoutError

    async def _client(self, stack: AsyncExitStack) -> Client:
        """An unopened SDK client for the spec; an HTTP client it needs is entered on ``stack``."""
        spec = self.spec
        options: dict[str, Any] = {
            "client_info": types.Implementation(name="shelly", version="0"),
            "read_timeout_seconds": self._call_timeout,
        }
        if spec.command:
            params = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env or None)
            return Client(stdio_client(params, errlog=server_errlog()), **options)
        assert spec.url is not None
        http = await stack.enter_async_context(create_mcp_http_client(headers=spec.headers or None))
        return Client(streamable_http_client(spec.url, http_client=http), **options)

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """Open, serve, and on a lost connection reopen the session; always in this one task."""
        generation = 0
        carry: _Item | None = None
        try:
            while True:
                generation += 1
                if generation > 1:
                    self.restarts += 1
                    logger.warning('mcp server "%s": reopening the session', self.name)
                try:
                    async with self._session() as client:
                        if not ready.done():
                            logger.info('mcp server "%s" started', self.name)
                            ready.set_result(None)
                        if await self._serve(client, generation, carry):
                            return
                        carry = None
                except Exception as exc:
                    reason = (
                        f"no answer within {self._startup_timeout:g}s"
                        if isinstance(exc, TimeoutError)
                        else _describe(exc)
                    )
                    if not ready.done():
                        ready.set_exception(self._error(f"failed to start: {reason}"))
                        return
                    logger.warning('mcp server "%s": restart failed: %s', self.name, reason)
                    self._fail_queued(self._error(f"restart failed: {reason}"))
                    carry = await self._next_request()
                    if carry is None:
                        return
        finally:
            self._closed = True
            if not ready.done():
                ready.set_exception(self._error("failed to start: cancelled"))
            self._fail_queued(self._error("client is closed"))

    async def _next_request(self) -> _Request | None:
        """Wait for the next call after a failed restart; ``None`` when the client is closing."""
        while True:
            item = await self._queue.get()
            if isinstance(item, _Close):
                return None
            if isinstance(item, _Request):
                return item

    async def _serve(self, client: Client, generation: int, carry: _Item | None) -> bool:
        """Run requests until closed (``True``) or a restart of this generation is asked (``False``).

        On a restart, requests in flight finish first (on a dead server they fail at once and
        queue themselves again).
        """
        async with anyio.create_task_group() as tg:
            item = carry
            while True:
                if item is None:
                    item = await self._queue.get()
                if isinstance(item, _Close):
                    tg.cancel_scope.cancel()
                    return True
                if isinstance(item, _Restart):
                    if item.generation == generation:
                        return False
                else:
                    tg.start_soon(self._run, client, generation, item)
                item = None

    async def _run(self, client: Client, generation: int, request: _Request) -> None:
        with anyio.CancelScope() as scope:
            # A caller that stops waiting (cancelled, timed out) cancels the work too.
            request.future.add_done_callback(lambda f: scope.cancel() if f.cancelled() else None)
            try:
                if request.op == "list":
                    result: Any = await self._list_all(client)
                else:
                    result = await client.call_tool(request.tool, request.arguments)
            except anyio.get_cancelled_exc_class():
                _settle(request.future, error=self._error("client is closed", tool=request.tool))
                raise
            except Exception as exc:
                if _is_connection_lost(exc) and not request.retried:
                    request.retried = True
                    self._queue.put_nowait(_Restart(generation))
                    self._queue.put_nowait(request)
                    return
                what = f"{request.tool}: " if request.tool else "tools/list: "
                reason = exc.message if isinstance(exc, SDKMCPError) else _describe(exc)
                _settle(request.future, error=self._error(what + reason, tool=request.tool))
            else:
                _settle(request.future, result=result)

    async def _list_all(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _fail_queued(self, error: MCPError) -> None:
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _Request):
                _settle(item.future, error=error)


async def connect_all(specs: Sequence[MCPServerSpec], **options: Any) -> list[MCPClient]:
    """Start a client per spec, concurrently. If any fails, all are closed and its error raised.

    ``options`` go to :class:`MCPClient` (``startup_timeout``, ``call_timeout``). Names must be
    unique (they become toolbox names).
    """
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"mcp: duplicate server names: {', '.join(duplicates)}")
    clients = [MCPClient(spec, **options) for spec in specs]
    try:
        outcomes = await asyncio.gather(*(c.start() for c in clients), return_exceptions=True)
    except BaseException:
        await close_all(clients)
        raise
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        await close_all(clients)
        raise errors[0]
    return clients


async def close_all(clients: Sequence[MCPClient]) -> None:
    """Close every client concurrently (each ``aclose`` is idempotent)."""
    await asyncio.gather(*(c.aclose() for c in clients))
