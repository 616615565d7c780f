"""``shelly questions`` and ``shelly answer``: the ``ask_user`` questions of runs on the pool.

A run that asks the user with no terminal attached (on a worker, in a batch, a piped ``shelly
run``) waits in Redis holding no worker. These commands list the open questions of a session and
answer one, from any machine that reaches the config's Redis and broker.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from shelly_dist.cli.distributed import load_settings
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option, session_option

if TYPE_CHECKING:
    from rich.console import Console

    from shelly_dist.cli.prompt import TerminalPrompt
    from shelly_dist.engine.decisions import Decisions
    from shelly_dist.engine.eventbus import Subscription
    from shelly_dist.events import Event


def _line(q: dict[str, Any]) -> str:
    options = f"  [{' / '.join(q['options'])}]" if q.get("options") else ""
    return f"{q['id']}  {q.get('agent', '?')}  run={q.get('run', '?')}  {q.get('text', '')}{options}"


async def _with_pool(config_path: str | None, shelly_dir: str, fn: Any) -> Any:
    from shelly_dist.runtime.celery.client.coordinator import CeleryRuntime

    runtime = CeleryRuntime(load_settings(config_path, shelly_dir), fingerprint="")
    try:
        return await fn(runtime)
    finally:
        await runtime.aclose()


async def announce_questions(events: Subscription, console: Console, session: str, asked_here: str | None,
                             prompt: TerminalPrompt | None = None, decisions: Decisions | None = None,
                             shown: Callable[[Event], Awaitable[None]] | None = None) -> None:
    """The decisions of remote runs (on workers), at ``shelly run``'s console: with a terminal
    (``prompt``), each approval a nested child asks is prompted for there, naming its path
    (``lead → deployer-1``), and the verdict goes through ``decisions``; otherwise, and for
    ``ask_user`` questions, print on stderr how to answer each one nobody here is prompted for
    (every decision of a run without a terminal; on a terminal, those of remote runs: every agent
    but ``asked_here``)."""
    try:
        async for event in events:
            if event.agent == asked_here or not event.data.get("id"):
                continue
            if shown is not None and event.kind in ("approval_requested", "ask_user"):
                await shown(event)
            if event.kind == "approval_requested":
                await _approval(event, console, session, prompt, decisions)
                continue
            if event.kind != "ask_user":
                continue
            q = {"id": event.data["id"], "agent": event.agent, "run": event.run_id or "?", **event.data}
            console.print(f"question {_line(q)}\n  answer it with: shelly answer --session {session} {q['id']} TEXT",
                          markup=False, highlight=False, soft_wrap=True)
    finally:
        events.close()


async def _approval(event: Event, console: Console, session: str, prompt: TerminalPrompt | None,
                    decisions: Decisions | None) -> None:
    from shelly_dist.cli.prompt import ask_approval
    from shelly_dist.tools.decisions import Approval

    approval = Approval.model_validate({**event.data, "arguments": json.dumps(event.data.get("arguments", {}))})
    if prompt is None or decisions is None:
        console.print(f"approval {approval.id}: {approval.prompt()}\n  decide with: shelly approve --session {session} "
                      f"{approval.id}  (or shelly reject … --reason TEXT)", markup=False, highlight=False,
                      soft_wrap=True)
        return
    verdict = await ask_approval(prompt, approval)
    if not await decisions.try_answer(session, approval.id, verdict.to_text(), by=verdict.by):
        console.print(f"approval {approval.id} was decided elsewhere", markup=False, highlight=False)


@click.command("questions")
@session_option
@json_option
@config_options
def questions_command(session_id: str, as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """List the session's open ask_user questions (id, agent, run, text, options)."""

    async def main() -> None:
        found = await _with_pool(config_path, shelly_dir, lambda rt: rt.questions(session_id))
        if as_json:
            keep = ("id", "agent", "run", "text", "options", "header", "multiSelect", "maxSelections")
            click.echo(json.dumps([{k: q[k] for k in keep if k in q} for q in found], ensure_ascii=False))
            return
        if not found:
            click.echo(f"no open questions in session {session_id}", err=True)
        for q in found:
            click.echo(_line(q))

    run_async(main())


@click.command("answer")
@session_option
@click.argument("question_id")
@click.argument("text")
@config_options
def answer_command(session_id: str, question_id: str, text: str, config_path: str | None, shelly_dir: str) -> None:
    """Answer decision QUESTION_ID with TEXT (an ask_user question; an approval with yes or no
    [reason]); the asking run resumes on any worker."""
    from shelly_dist.engine.decisions import who

    async def main() -> None:
        done = await _with_pool(config_path, shelly_dir,
                                lambda rt: rt.respond(session_id, question_id, text, by=who("cli")))
        click.echo(f"answered {question_id}; run {done.run} resumes", err=True)

    run_async(main())
