"""``shelly a2a serve``: one agent of the project as an A2A v1.0 server (JSON-RPC over HTTP).

The SDK's request handler does the protocol (``message/send``, ``message/stream`` as SSE,
``tasks/get``, ``tasks/cancel``); ours are the executor (a task is a run of the agent), the task
store (Redis on the pool), the card, and the bearer token: with one, every request but the card's
must carry ``Authorization: Bearer <token>`` — the card stays public, since it is how a caller
learns that a token is required.

A ``tasks/cancel`` that reaches a replica not running the task still stops its tree on the pool:
the tree is cancelled in Redis by session (the task's id) before the SDK records the cancel.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types.a2a_pb2 import CancelTaskRequest, SendMessageRequest, Task
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette

from shelly_dist.engine.a2a.card import agent_card
from shelly_dist.engine.a2a.executor import ShellyAgentExecutor
from shelly_dist.engine.a2a.tasks import task_store
from shelly_dist.models import streaming
from shelly_dist.tools.mcp.bearer import BearerTokenAuth
from shelly_dist.tools.mcp.server import listen, serve_asgi

if TYPE_CHECKING:
    from collections.abc import Callable

    from shelly_dist.engine.engine import Engine

RPC_PATH = "/"


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


class CardIsPublic:
    """ASGI: the card's path passes untouched, every other request needs the bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.guarded = BearerTokenAuth(app, token)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") == AGENT_CARD_WELL_KNOWN_PATH:
            await self.app(scope, receive, send)
            return
        await self.guarded(scope, receive, send)


def build_app(engine: Engine, agent: str, url: str, token: str | None) -> Any:
    """The ASGI app serving ``agent`` with its card announcing ``url``."""
    card = agent_card(engine, agent, url, token=bool(token))
    handler = ShellyRequestHandler(engine, agent_executor=ShellyAgentExecutor(engine, agent),
                                   task_store=task_store(engine.runtime), agent_card=card)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # tasks still running end (and their trees are cancelled)

    app: Any = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, RPC_PATH)],
                         lifespan=lifespan)
    return CardIsPublic(app, token) if token else app


async def serve(
    engine: Engine,
    agent: str,
    *,
    host: str,
    port: int,
    token: str | None,
    public_url: str | None = None,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve until cancelled; ``on_listening(url)`` once the socket accepts connections."""
    sock = listen(host, port)
    bound = int(sock.getsockname()[1])
    url = public_url or f"http://{'[' + host + ']' if ':' in host else host}:{bound}{RPC_PATH}"
    try:
        app = build_app(engine, agent, url, token)
    except BaseException:
        sock.close()
        raise
    if on_listening is not None:
        on_listening(url)
    await serve_asgi(app, sock)
