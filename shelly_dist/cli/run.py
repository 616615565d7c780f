"""``shelly run``: one task through the team; the answer on stdout, progress on stderr.

stdout carries only the result (the reply text, or exactly one JSON object with ``--json``:
``{session, agent, reply, usage, tree_usage, warnings, elapsed}`` — ``usage`` the top-level run's
own calls, ``tree_usage`` those of the whole delegation tree, ``warnings`` every ``warning`` event
of the tree; a failed run's object has ``error`` instead of ``reply``, and exits 1), so
``shelly run … | jq`` works. The
session id goes to stderr at the start (it scopes the boards and ``shelly answer``), and
``continue with --session ID`` once the turn succeeded and the session was saved: a session whose
first turn failed does not exist, so it is never offered. Ctrl-C cancels the run (and with it every
child) and exits 130. On a terminal (stdin and stderr), the built-in tools may ask the user for a
permission the config does not give, and agents may ask the user questions (``ask_user``),
pausing the live view (:mod:`shelly_dist.cli.prompt`); piped, or on a worker, permissions are
refused. Without a terminal, ``ask_user`` waits for ``shelly answer`` when the config has a broker
(the question and how to answer it are printed on stderr; see
:mod:`shelly_dist.runtime.celery.children.questions`), and is an error result telling the model nobody can
answer otherwise; questions of runs on workers always wait for ``shelly answer``.

A run whose model call goes to a vendor's batch API (a provider's ``batch:``) may wait hours for
it: the first time one does, ``shelly run`` says so on stderr, with how to leave such a run
running instead — ``--detach`` (with a worker pool) starts the run on the pool, prints its id and
returns; ``shelly runs`` and ``shelly events`` follow it, ``shelly cancel`` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console

from shelly_dist import events
from shelly_dist.chats.attachments import attachment
from shelly_dist.chats.parts import Part
from shelly_dist.cli.errors import describe, fail, run_async
from shelly_dist.cli.live import LiveView
from shelly_dist.cli.options import config_options, json_option
from shelly_dist.cli.prompt import TerminalAnswerer, TerminalPrompt
from shelly_dist.cli.questions import announce_questions
from shelly_dist.engine import Config, Engine
from shelly_dist.engine.session import user_messages
from shelly_dist.errors import SessionNotSaved, UsageError
from shelly_dist.events import BATCH_SUBMITTED, Event
from shelly_dist.models import Usage, streaming
from shelly_dist.tools.builtin.ask import NoAnswerer


class Watched:
    """What ``--json`` reports besides the reply, read off the engine's bus while the run goes:
    the warnings (``reply_truncated``, ``context_overflow``, …) and, for a run that fails before
    it has an outcome, the usage of every model call the tree made (each ``message_added``)."""

    def __init__(self, bus: Any, agent: str) -> None:
        self.agent = agent
        self.warnings: list[dict[str, Any]] = []
        self.usage = Usage()
        self.tree_usage = Usage()
        self._sub = bus.subscribe(buffer=65_536)
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        async for event in self._sub:
            if event.kind == events.WARNING:
                self.warnings.append({"agent": event.agent, "run": event.run_id, **event.data})
            elif event.kind == events.MESSAGE_ADDED and isinstance(event.data.get("usage"), dict):
                spent = Usage.model_validate(event.data["usage"])
                self.tree_usage = self.tree_usage + spent
                if event.agent == self.agent:
                    self.usage = self.usage + spent

    async def close(self) -> None:
        """Read what the bus still holds, then stop (idempotent; a cancelled run stops it too)."""
        self._sub.close()
        if asyncio.current_task() is not None and asyncio.current_task().cancelling():  # type: ignore[union-attr]
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class RunFailed(Exception):
    """A run that failed, with the ``--json`` object that says so (``error``, usage, warnings)."""

    def __init__(self, result: dict[str, Any], cause: BaseException) -> None:
        super().__init__(str(cause))
        self.result = result
        self.cause = cause


class AnswerNotSaved(Exception):
    """A finished run's ``--json`` object whose session could not be saved (``cause``)."""

    def __init__(self, result: dict[str, Any], cause: SessionNotSaved) -> None:
        super().__init__(str(cause))
        self.result = result
        self.cause = cause


def read_task(task: str | None) -> str:
    """The task from the argument, else from stdin (when it is not a terminal)."""
    if task is None and not sys.stdin.isatty():
        task = sys.stdin.read()
    task = (task or "").strip()
    if not task:
        raise UsageError("run: no task: pass it as an argument or on stdin")
    return task


async def run_task(
    task: str,
    *,
    agent: str | None,
    config_path: Config | str | None,
    shelly_dir: str,
    session_id: str | None,
    view_mode: str,
    console: Console,
    interactive: bool = False,
    attachments: Sequence[Part] = (),
) -> dict[str, Any]:
    """Open the engine, run ``task`` (with ``attachments``, parts of files already read) in a new
    or resumed session, return the ``--json`` object."""
    started = time.monotonic()
    views: list[LiveView] = []
    prompt = TerminalPrompt(console, views) if interactive else None
    async with await Engine.open(
        config_path,
        shelly_dir=shelly_dir,
        approver=prompt.approver() if prompt else None,
        answerer=TerminalAnswerer(prompt) if prompt else NoAnswerer(),  # headless: nobody here answers
        root=agent or True,  # on a pool: this agent's MCP servers (a resumed session starts its agent's)
    ) as engine:
        if session_id:
            session = await engine.resume_session(session_id)
            if agent and engine.agent_name(agent) != session.info.agent:
                raise UsageError(f'run: session {session_id} belongs to agent "{session.info.agent}", not "{agent}"')
        else:
            session = engine.session(agent=agent)
        if view_mode != "quiet":  # the id scopes the boards and questions from the start
            console.print(f"session {session.id}", markup=False, highlight=False)
        hints = None
        if hasattr(engine.runtime, "respond"):  # decisions of runs on workers: prompted here, or say how
            async def shown(event: Event) -> None:  # the live view is opened just below
                if views:
                    await views[-1].shown(event)

            hints = asyncio.create_task(announce_questions(engine.bus.subscribe(), console, session.id,
                                                           session.agent.name if interactive else None,
                                                           prompt, engine.decisions, shown))
        watched = Watched(engine.bus, session.agent.name)
        batches = asyncio.create_task(warn_on_provider_batch(engine.bus.subscribe(), console, session.id))
        try:
            async with LiveView(engine.bus, console, view_mode) as view:
                views.append(view)
                with streaming.watching(view.mode == "live"):  # replies stream into the live table
                    outcome = await session.send_messages(user_messages(task, attachments=attachments))
        except SessionNotSaved as exc:  # the answer is printed all the same, then the failure named
            await watched.close()
            raise AnswerNotSaved(_result(session, exc.outcome, started, watched), exc) from exc
        except Exception as exc:  # --json still prints one object: what failed, and what it cost
            await watched.close()
            raise RunFailed(_failed(session, exc, started, watched), exc) from exc
        finally:
            batches.cancel()
            if hints is not None:
                hints.cancel()
            await watched.close()
        if view_mode != "quiet" and session.persist:  # saved now: only now can it be continued
            console.print(f"continue with --session {session.id}", markup=False, highlight=False)
    return _result(session, outcome, started, watched)


async def warn_on_provider_batch(events: Any, console: Console, session: str) -> None:
    """Say once, on stderr, that the run waits on a vendor batch, and how not to wait for it."""
    try:
        async for event in events:
            if event.kind == BATCH_SUBMITTED:
                vendor = event.data.get("vendor") or "a provider"
                console.print(
                    f"shelly: warning: {event.agent or 'a run'} waits for a provider batch ({vendor}): its reply may "
                    f"take hours "
                    f"(the vendor's window is 24 h). Ctrl-C cancels the run; to leave such a run running, start it "
                    f"with `shelly run --detach` (a worker pool) and follow it with `shelly runs --session {session}` "
                    f"or `shelly events --session {session} --follow`",
                    markup=False, highlight=False, soft_wrap=True)
                return
    finally:
        events.close()


async def detach(task: str, *, agent: str | None, config_path: Config | str | None, shelly_dir: str,
                 console: Console, attachments: Sequence[Part] = ()) -> dict[str, Any]:
    """Start ``task`` (with ``attachments``: their bytes go in the run's journal) as a root run on
    the worker pool and return at once: ``{session, agent, run}``."""
    from shelly_dist.engine.sessions import new_session_id

    async with await Engine.open(config_path, shelly_dir=shelly_dir, answerer=NoAnswerer()) as engine:
        submit = getattr(engine.runtime, "submit", None)
        if submit is None:
            raise UsageError("run: --detach needs a worker pool (distributed.broker_url or SHELLY_BROKER_URL): "
                             "embedded, the run lives in this process")
        name = engine.agent_name(agent)
        session = new_session_id()
        run_id = await submit(name, user_messages(task, attachments=attachments) if attachments else task,
                              session=session)
    console.print(f"session {session}: run {run_id} started on the pool\n"
                  f"  follow it with: shelly runs --session {session}"
                  f"   or   shelly events --session {session} --follow\n"
                  f"  cancel it with: shelly cancel {run_id}", markup=False, highlight=False, soft_wrap=True)
    return {"session": session, "agent": name, "run": run_id}


def _result(session: Any, outcome: Any, started: float, watched: Watched) -> dict[str, Any]:
    """The ``--json`` object of a finished run (``tree_usage``: the whole delegation tree's)."""
    tree = outcome.tree_usage if outcome.tree_usage is not None else outcome.usage
    return {
        "session": session.id,
        "agent": session.info.agent,
        "reply": outcome.reply.text_content(),
        "usage": outcome.usage.model_dump(),
        "tree_usage": tree.model_dump(),
        "warnings": watched.warnings,
        "elapsed": round(time.monotonic() - started, 3),
    }


def _failed(session: Any, exc: BaseException, started: float, watched: Watched) -> dict[str, Any]:
    """The ``--json`` object of a failed run: the error instead of a reply, and the usage of the
    calls its tree made before it failed (as their events reported them)."""
    return {
        "session": session.id,
        "agent": session.info.agent,
        "error": describe(exc)[1],
        "usage": watched.usage.model_dump(),
        "tree_usage": watched.tree_usage.model_dump(),
        "warnings": watched.warnings,
        "elapsed": round(time.monotonic() - started, 3),
    }


@click.command("run")
@click.argument("task", required=False)
@click.option("--agent", default=None, help="Agent to run (default: entry_agent, else the first).")
@config_options
@click.option("--session", "session_id", default=None, help="Continue a saved session by id.")
@click.option("--attach", "attach", multiple=True, metavar="FILE",
              help="Send FILE with the task (repeatable): an image, a PDF or a UTF-8 text file.")
@json_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--detach", is_flag=True,
              help="Start the run on the worker pool, print its id and return (a run that waits for provider "
                   "batches can take hours); follow it with `shelly runs` / `shelly events`.")
def run_command(
    task: str | None,
    agent: str | None,
    config_path: str | None,
    shelly_dir: str,
    session_id: str | None,
    attach: tuple[str, ...],
    as_json: bool,
    quiet: bool,
    detach: bool,
) -> None:
    """Run TASK (or stdin) through the team and print the final answer."""
    try:
        text = read_task(task)
        if detach and session_id:
            raise UsageError("run: --detach starts a new session; it cannot continue --session")
        files = [attachment(path) for path in attach]  # read once, here: a worker never opens them
    except UsageError as exc:
        fail(exc)
    if detach:
        started = run_async(_detach(text, agent, config_path, shelly_dir, files))
        click.echo(json.dumps(started) if as_json else started["run"])
        return
    run_and_print(
        text, agent=agent, config_path=config_path, shelly_dir=shelly_dir, session_id=session_id,
        quiet=quiet, as_json=as_json, may_ask=task is not None, attachments=files,
    )


async def _detach(task: str, agent: str | None, config_path: str | None, shelly_dir: str,
                  attachments: Sequence[Part]) -> dict[str, Any]:
    return await detach(task, agent=agent, config_path=config_path, shelly_dir=shelly_dir,
                        console=Console(stderr=True), attachments=attachments)


def run_and_print(
    task: str,
    *,
    agent: str | None,
    config_path: Config | str | None,
    shelly_dir: str,
    session_id: str | None,
    quiet: bool,
    as_json: bool,
    may_ask: bool,
    attachments: Sequence[Part] = (),
) -> None:
    """Run ``task`` (see :func:`run_task`) and print the reply, or the ``--json`` object.

    The user is asked questions only when ``may_ask`` (stdin is not the task) and both stdin and
    stderr are a terminal. A run that finished but whose session could not be saved prints its
    answer all the same, then names the failure (exit 1).
    """
    console = Console(stderr=True)

    async def answer_even_unsaved(run: Any) -> tuple[dict[str, Any], BaseException | None]:
        try:
            return await run, None
        except AnswerNotSaved as exc:
            return exc.result, exc.cause
        except RunFailed as exc:
            if not as_json:
                # Re-raised with its own cause kept (``from None`` would erase it, and the
                # first-hour explanation reads the Redis or broker error in that chain).
                raise exc.cause from exc.cause.__cause__
            return exc.result, exc.cause

    result, unsaved = run_async(answer_even_unsaved(
        run_task(
            task,
            agent=agent,
            config_path=config_path,
            shelly_dir=shelly_dir,
            session_id=session_id,
            view_mode="quiet" if quiet else "auto",
            console=console,
            interactive=may_ask and sys.stdin.isatty() and console.is_terminal,
            attachments=attachments,
        )
    ))
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False))
    elif "reply" in result:
        click.echo(result["reply"])
    if unsaved is not None:
        fail(unsaved)

