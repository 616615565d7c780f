"""The console's HTTP routes: JSON for sessions, trees, chats, cancel, decisions and steering; SSE
for events; the page.

Every route is documented in docs/reference.md ("shelly serve"). Handlers only parse, ask the
backend and shape the answer; errors become ``{"error": "..."}`` with a status that says whose
fault it was (:func:`errors`): 400 a bad request (naming the field), 404 an unknown session or
run, 503 Redis not answering.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shelly_dist.console import sse
from shelly_dist.console.backend import Backend
from shelly_dist.console.gate import COOKIE, Gate
from shelly_dist.console.views import chat_json, run_rows
from shelly_dist.errors import StoreError, UsageError
from shelly_dist.tools.decisions import Verdict

M = TypeVar("M", bound=BaseModel)

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


class Decide(BaseModel):
    """The body of ``POST /api/decisions/{id}``: ``answer`` (a question's text, or an approval's
    ``yes``/``no [reason]``), or ``decision`` with its ``arguments``/``reason``/``always``."""

    model_config = ConfigDict(extra="forbid")
    session: str = Field(min_length=1)
    answer: str | None = Field(None, max_length=TASK_MAX)
    decision: Literal["approve", "reject"] | None = None
    arguments: str | None = Field(None, max_length=TASK_MAX)
    reason: str = Field("", max_length=TASK_MAX)
    always: bool = False


class DecideAll(BaseModel):
    """The body of ``POST /api/decisions``: a verdict for every open approval matching."""

    model_config = ConfigDict(extra="forbid")
    decision: Literal["approve", "reject"]
    tool: str | None = None
    session: str | None = None
    batch: str | None = None
    reason: str = Field("", max_length=TASK_MAX)
    always: bool = False


class Steer(BaseModel):
    """The body of ``POST /api/sessions/{id}/steer``."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=TASK_MAX)
    agent: str | None = None
    run: str | None = None
    interrupt: bool = False


def _parsed(model: type[M], body: Any, request: web.Request) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"serve: {request.method} {request.path}: {problems}") from exc


def _who(request: web.Request) -> str:
    """Who decides from the console: a label with the client's address (never the token)."""
    return f"console:{request.remote or '?'}"


@routes.get("/api/decisions")
async def list_decisions(request: web.Request) -> web.Response:
    q = request.query
    found = await request.app[BACKEND].decisions.list(session=q.get("session"), agent=q.get("agent"),
                                                      kind=q.get("kind"), tool=q.get("tool"), batch=q.get("batch"))
    return web.json_response({"decisions": found})


@routes.post("/api/decisions/{id}")
async def decide(request: web.Request) -> web.Response:
    body = _parsed(Decide, await _json_body(request), request)
    decisions, decision_id = request.app[BACKEND].decisions, request.match_info["id"]
    if (body.answer is None) == (body.decision is None):
        raise UsageError(f"serve: POST {request.path}: give answer or decision, not both or neither")
    if body.answer is not None:
        await decisions.answer(body.session, decision_id, body.answer, by=_who(request))
    elif body.decision == "approve":
        await decisions.approve(body.session, decision_id, arguments=body.arguments, always=body.always,
                                by=_who(request))
    else:
        await decisions.reject(body.session, decision_id, reason=body.reason, always=body.always, by=_who(request))
    return web.json_response({"decided": decision_id, "session": body.session})


@routes.post("/api/decisions")
async def decide_all(request: web.Request) -> web.Response:
    body = _parsed(DecideAll, await _json_body(request), request)
    verdict = (Verdict.approve(by=_who(request), always=body.always) if body.decision == "approve"
               else Verdict.reject(body.reason, by=_who(request), always=body.always))
    n = await request.app[BACKEND].decisions.decide_all(verdict, tool=body.tool, session=body.session,
                                                        batch=body.batch)
    return web.json_response({"decided": n})


@routes.post("/api/sessions/{id}/steer")
async def steer(request: web.Request) -> web.Response:
    body = _parsed(Steer, await _json_body(request), request)
    run = await request.app[BACKEND].decisions.steer(request.match_info["id"], body.text, agent=body.agent,
                                                      run=body.run, interrupt=body.interrupt, by=_who(request))
    return web.json_response({"session": request.match_info["id"], "run": run})


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
