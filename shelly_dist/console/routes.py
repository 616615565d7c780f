"""The console's HTTP routes: JSON for sessions, trees, chats and cancel; SSE for events; the page.

Every route is documented in docs/reference.md ("shelly serve"). Handlers only parse, ask the
backend and shape the answer; errors become ``{"error": "..."}`` with a status that says whose
fault it was (:func:`errors`): 400 a bad request (naming the field), 404 an unknown session or
run, 503 Redis not answering.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shelly_dist.console import sse
from shelly_dist.console.backend import Backend
from shelly_dist.console.gate import COOKIE, Gate
from shelly_dist.console.views import chat_json, run_rows
from shelly_dist.errors import StoreError, UsageError

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
PAGE_LIMIT = 50
PAGE_MAX = 200
TASK_MAX = 100_000

BACKEND: web.AppKey[Backend] = web.AppKey("backend", Backend)  # type: ignore[type-abstract]
GATE: web.AppKey[Gate] = web.AppKey("gate", Gate)
KEEPALIVE: web.AppKey[float] = web.AppKey("keepalive", float)

routes = web.RouteTableDef()


class NewSession(BaseModel):
    """The body of ``POST /api/sessions``."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=TASK_MAX)
    agent: str | None = None
    context: str = Field("", max_length=TASK_MAX)


def _not_found(what: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=f"serve: {what} not found", content_type="text/plain")


async def _json_body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise UsageError(f"serve: {request.method} {request.path}: the body is not JSON ({exc})") from exc


@routes.get("/api/health")
async def health(request: web.Request) -> web.Response:
    return web.json_response(await request.app[BACKEND].health())


@routes.post("/api/login")
async def login(request: web.Request) -> web.Response:
    """Check a token and keep it in the console's cookie (what ``EventSource`` can send)."""
    body = await _json_body(request)
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not request.app[GATE].matches(token):
        return web.json_response({"error": "serve: login: wrong token"}, status=401)
    response = web.json_response({"ok": True})
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=request.secure, path="/")
    return response


@routes.get("/api/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    raw = request.query.get("limit", str(PAGE_LIMIT))
    if not raw.isdigit() or not 1 <= int(raw) <= PAGE_MAX:
        raise UsageError(f"serve: GET /api/sessions: limit {raw!r} must be a number from 1 to {PAGE_MAX}")
    page = await request.app[BACKEND].sessions(limit=int(raw), cursor=request.query.get("cursor") or None)
    return web.json_response({"sessions": [s.to_json() for s in page.sessions], "next": page.next})


@routes.post("/api/sessions")
async def new_session(request: web.Request) -> web.Response:
    try:
        body = NewSession.model_validate(await _json_body(request))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"serve: POST /api/sessions: {problems}") from exc
    # Shielded: a client that hangs up mid-submit must not leave a run recorded and never sent.
    session, run = await asyncio.shield(request.app[BACKEND].start(body.task, agent=body.agent,
                                                                   context=body.context))
    return web.json_response({"session": session, "run": run}, status=201)


@routes.get("/api/sessions/{id}")
async def get_session(request: web.Request) -> web.Response:
    view = await request.app[BACKEND].session(request.match_info["id"])
    if view is None:
        raise _not_found(f"session {request.match_info['id']}")
    return web.json_response(view.to_json(detail=True))


@routes.post("/api/sessions/{id}/cancel")
async def cancel_session(request: web.Request) -> web.Response:
    session = request.match_info["id"]
    roots = await request.app[BACKEND].cancel(session)
    if roots is None:
        raise _not_found(f"session {session}")
    return web.json_response({"session": session, "canceled": roots})


@routes.get("/api/sessions/{id}/runs")
async def session_runs(request: web.Request) -> web.Response:
    session = request.match_info["id"]
    runs = await request.app[BACKEND].runs(session)
    if runs is None:
        raise _not_found(f"session {session}")
    return web.json_response({"session": session, "runs": run_rows(runs)})


@routes.get("/api/runs/{id}/chat")
async def run_chat(request: web.Request) -> web.Response:
    found = await request.app[BACKEND].chat(request.match_info["id"])
    if found is None:
        raise _not_found(f"run {request.match_info['id']}")
    run, messages, complete = found
    return web.json_response(chat_json(run, messages, complete=complete))


def _last_event_id(request: web.Request) -> str | None:
    return request.headers.get("Last-Event-ID") or request.query.get("after") or None


@routes.get("/api/sessions/{id}/events")
async def session_events(request: web.Request) -> web.StreamResponse:
    backend, session = request.app[BACKEND], request.match_info["id"]
    if await backend.session(session) is None:
        raise _not_found(f"session {session}")
    events = backend.events(session, _last_event_id(request))
    return await sse.stream(request, events, keepalive=request.app[KEEPALIVE])


@routes.get("/api/events")
async def all_events(request: web.Request) -> web.StreamResponse:
    events = request.app[BACKEND].events(None, _last_event_id(request))
    return await sse.stream(request, events, keepalive=request.app[KEEPALIVE])


@routes.get("/")
async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


@routes.get("/sessions/{id}")
async def session_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


routes.static("/static", STATIC)


@web.middleware
async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error as ``{"error": ...}``: the library's own (404, 405, 413…), a bad request (400),
    Redis not answering (503)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        text = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else f"serve: {exc.reason}"
        return web.json_response({"error": text}, status=exc.status, headers={
            k: v for k, v in exc.headers.items() if k.lower() in ("allow", "www-authenticate")})
    except UsageError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except StoreError as exc:
        logger.warning("serve: %s %s: %s", request.method, request.path, exc)
        return web.json_response({"error": f"serve: the store is not answering: {exc}"}, status=503)
