"""``shelly a2a serve``: one agent of the project as an A2A v1.0 server (JSON-RPC over HTTP).

The SDK's request handler does the protocol (``message/send``, ``message/stream`` as SSE,
``tasks/get``, ``tasks/cancel``); ours are the executor (a task is a run of the agent), the task
store (Redis on the pool), the card, and the bearer tokens: with one, every request but the card's
must carry ``Authorization: Bearer <token>`` — the card stays public, since it is how a caller
learns that a token is required. With several (``--caller NAME=TOKEN``) each names a caller, and a
caller sees only its own tasks. In front of all of it, the ``Host``/``Origin`` check and the body
bound the console has (:mod:`~shelly_dist.tools.mcp.hostcheck`, 4 MB here): a DNS-rebinding page
cannot drive a tokenless loopback server, and a huge body is refused before it is read.

A ``tasks/cancel`` that reaches a replica not running the task still stops its tree on the pool:
the tree is cancelled in Redis by session (the task's id) before the SDK records the cancel.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types.a2a_pb2 import CancelTaskRequest, SendMessageRequest, Task
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, SimpleUser
from yarl import URL

from shelly_dist.engine.a2a.card import agent_card
from shelly_dist.engine.a2a.executor import ShellyAgentExecutor
from shelly_dist.engine.a2a.tasks import task_store
from shelly_dist.errors import UsageError
from shelly_dist.models import streaming
from shelly_dist.tools.mcp.hostcheck import LOOPBACK_NAMES, HostOriginGuard, allowed_hosts, host_name
from shelly_dist.tools.mcp.server import listen, serve_asgi

if TYPE_CHECKING:
    from collections.abc import Callable

    from shelly_dist.engine.engine import Engine

RPC_PATH = "/"
MAX_BODY = 4 * 1024 * 1024
"""Bytes a request body may hold (``--max-body``): larger ones are refused (413) unread."""


class ShellyRequestHandler(DefaultRequestHandlerV2):
    """The SDK's handler, with ``tasks/cancel`` reaching the tree wherever it runs, and the run of
    a ``message/stream`` watched: its replies stream, their text sent as it is written."""

    def __init__(self, engine: Engine, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._runtime = engine.runtime

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncIterator[Any]:
        events = super().on_message_send_stream(params, context)
        # The run's task starts before the first event: it inherits the mark. The mark is set and
        # reset within this one step (a generator's steps may run in different contexts).
        with streaming.watching():
            try:
                first = await anext(events)
            except StopAsyncIteration:
                return
        yield first
        async for event in events:
            yield event

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        cancel_session = getattr(self._runtime, "cancel_session", None)
        if cancel_session is not None and await self.task_store.get(params.id, context) is not None:
            await cancel_session(params.id)  # the pool: any replica stops the tree through Redis
        return await super().on_cancel_task(params, context)


class CallerTokens:
    """ASGI: the card's path passes untouched; every other request must carry one of the bearer
    tokens (constant-time against each), and the caller it names becomes the request's user, so
    the task store keeps each caller's tasks apart (``tasks/list`` and ``tasks/get`` show a caller
    its own tasks only; :mod:`~shelly_dist.engine.a2a.tasks`)."""

    def __init__(self, app: Any, callers: Mapping[str, str]) -> None:
        if not callers or not all(callers):
            raise ValueError("a2a: a bearer token must not be empty")
        self.app = app
        self._callers = [(token.encode(), name) for token, name in callers.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") == AGENT_CARD_WELL_KNOWN_PATH:
            await self.app(scope, receive, send)
            return
        presented = _presented(scope)
        caller = None
        for token, name in self._callers:  # every token compared, so timing tells nothing
            if hmac.compare_digest(presented, token) and caller is None:
                caller = name
        if caller is None:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b'Bearer realm="shelly"')]})
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        scope["user"] = SimpleUser(caller)
        scope["auth"] = AuthCredentials(["authenticated"])
        await self.app(scope, receive, send)


_UNAUTHORIZED = b'{"error":"a2a: unauthorized: send Authorization: Bearer <token>"}'


def _presented(scope: Any) -> bytes:
    for name, value in scope.get("headers") or ():
        if bytes(name).lower() == b"authorization":
            scheme, _, credentials = bytes(value).partition(b" ")
            return credentials.strip() if scheme.lower() == b"bearer" else b""
    return b""


def caller_tokens(token: str | None, callers: Iterable[str] = ()) -> dict[str, str]:
    """Token → caller name: ``token`` is the caller ``default``; each of ``callers`` is
    ``NAME=TOKEN``. A malformed entry, an empty token or one token for two callers is an error."""
    out: dict[str, str] = {token: "default"} if token else {}
    for entry in callers:
        name, sep, secret = entry.partition("=")
        if not sep or not name.strip() or not secret.strip():
            raise UsageError(f"a2a serve: --caller {name.strip() or entry!r}: expected NAME=TOKEN")
        if secret.strip() in out:
            raise UsageError(f"a2a serve: caller {name.strip()!r} has the token of caller {out[secret.strip()]!r}")
        out[secret.strip()] = name.strip()
    return out


def build_app(engine: Engine, agent: str, url: str, token: str | None, *, callers: Mapping[str, str] | None = None,
              hosts: frozenset[str] | None = LOOPBACK_NAMES, max_body: int = MAX_BODY) -> Any:
    """The ASGI app serving ``agent`` with its card announcing ``url``: behind the shared
    ``Host``/``Origin`` check and body bound (:mod:`~shelly_dist.tools.mcp.hostcheck`), then the
    caller tokens (``callers``, token → name; ``token`` alone is one caller)."""
    callers = dict(callers or caller_tokens(token))
    card = agent_card(engine, agent, url, token=bool(callers))
    handler = ShellyRequestHandler(engine, agent_executor=ShellyAgentExecutor(engine, agent),
                                   task_store=task_store(engine.runtime), agent_card=card)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # tasks still running end (and their trees are cancelled)

    app: Any = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, RPC_PATH)],
                         lifespan=lifespan)
    if callers:
        app = CallerTokens(app, callers)
    return HostOriginGuard(app, who="a2a", hosts=hosts, max_body=max_body)


async def serve(
    engine: Engine,
    agent: str,
    *,
    host: str,
    port: int,
    token: str | None,
    public_url: str | None = None,
    on_listening: Callable[[str], None] | None = None,
    callers: Mapping[str, str] | None = None,
    allow_hosts: Iterable[str] = (),
    max_body: int = MAX_BODY,
) -> None:
    """Serve until cancelled; ``on_listening(url)`` once the socket accepts connections. The
    ``Host`` names answered are loopback's, the bound address, ``allow_hosts`` and the public
    URL's host (:func:`~shelly_dist.tools.mcp.hostcheck.allowed_hosts`)."""
    sock = listen(host, port)
    bound = int(sock.getsockname()[1])
    url = public_url or f"http://{'[' + host + ']' if ':' in host else host}:{bound}{RPC_PATH}"
    try:
        extra = [*allow_hosts, *([host_name(URL(public_url).raw_authority or "")] if public_url else [])]
        app = build_app(engine, agent, url, token, callers=callers, hosts=allowed_hosts(host, extra),
                        max_body=max_body)
    except BaseException:
        sock.close()
        raise
    if on_listening is not None:
        on_listening(url)
    await serve_asgi(app, sock)
